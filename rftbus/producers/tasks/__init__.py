"""The taskset producer: reading task sources and publishing Task records to `topics.tasks`."""
