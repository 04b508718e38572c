"""rftbus.ground.schemas: Avro schemas (``*.avsc``, published versions in ``history/``), typed records and the codec.

Schemas evolve only backward-compatibly: every field added after v1 needs a default, and each
published version is copied to ``history/<Name>/vN.avsc`` so old bytes keep decoding.
"""

from .bounds import REJECTION_MAX_BYTES, bound_id, bound_key, fitted_rejection
from .codec import (
    CONFLUENT_MAGIC,
    SINGLE_OBJECT_MAGIC,
    AvroDeserializer,
    AvroSerializer,
    Codec,
    DecodeError,
    EncodeError,
    make_codec,
    registry_client,
    topic_context,
)
from .records import (
    RECORD_TYPES,
    AvroRecord,
    Experience,
    ExperienceGroup,
    Feedback,
    FeedbackKind,
    GateDecision,
    Image,
    Rejection,
    Source,
    Task,
    TrainerMetric,
    WeightVersion,
    new_id,
    now_ms,
    record_class,
)
from .store import (
    SCHEMA_DIR,
    SchemaEntry,
    SchemaStore,
    canonical_form,
    fingerprint64,
    get_store,
    load_schema,
    load_schema_str,
)

__all__ = [
    "AvroDeserializer", "AvroRecord", "AvroSerializer", "CONFLUENT_MAGIC", "Codec", "DecodeError",
    "EncodeError", "Experience", "ExperienceGroup", "Feedback", "FeedbackKind", "RECORD_TYPES", "Rejection",
    "SCHEMA_DIR", "SINGLE_OBJECT_MAGIC", "SchemaEntry", "SchemaStore", "Source", "Task",
    "TrainerMetric", "WeightVersion", "GateDecision", "Image", "canonical_form", "fingerprint64", "get_store", "load_schema",
    "load_schema_str", "make_codec", "REJECTION_MAX_BYTES", "bound_id", "bound_key", "fitted_rejection", "new_id", "now_ms", "record_class", "registry_client", "topic_context",
]
