"""rftbus: continuous reinforcement fine-tuning of language models over Apache Kafka."""

__version__ = "0.1.0"
