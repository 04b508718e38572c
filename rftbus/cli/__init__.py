"""The `rftbus` command line."""
