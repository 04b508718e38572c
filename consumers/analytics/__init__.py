"""Experience analytics: every rftbus topic into ClickHouse (chDB embedded, or a server)."""
