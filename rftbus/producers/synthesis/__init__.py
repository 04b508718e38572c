"""The synthesize stage: new tasks written from what the log says the policy fails at or has mastered, checked,
deduplicated, bounded and published to `rft.tasks` with their lineage (`rftbus synthesize`; the config's
`synthesis:` section). Synthesizers are pluggable like rewards (base.py)."""
