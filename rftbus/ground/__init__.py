"""The ground: what every component stands on (configuration, the Kafka client and topic registry, the record
schemas and codec, the weight store and its follower, models, the rewards and the grade rules that more than one
component applies, HTTP helpers, the embedded broker). It imports no component and no app (tests/unit/test_layers.py)."""
