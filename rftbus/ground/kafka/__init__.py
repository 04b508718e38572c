"""Kafka client construction, topic administration and inspection, shared by every rftbus process."""
