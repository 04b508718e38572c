"""The embedded single-node Apache Kafka broker (KRaft combined mode, official jars from Maven Central)."""
