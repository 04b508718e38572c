"""The main job: `rftbus run` supervises the whole loop on one machine and shows it."""
