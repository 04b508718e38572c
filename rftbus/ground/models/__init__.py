"""Policy models and tokenizers shared by explorers and the trainer: a tiny model built from config
(no download) or any Hugging Face causal LM by path. Import `rftbus.ground.models.loading` for the torch side."""
