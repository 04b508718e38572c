"""A character-level tokenizer for the built-in toy tasks, as a real `PreTrainedTokenizerFast`.

It is built from the `tokenizers` library (WordLevel over single characters), so the explorer, the
trainer and `save_pretrained` treat it like any Hugging Face tokenizer.
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = [PAD, BOS, EOS, UNK]
ALPHABET = string.digits + string.ascii_lowercase + "+-*=?:,. "


def build_char_tokenizer(alphabet: str = ALPHABET) -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(SPECIALS + list(dict.fromkeys(alphabet)))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # Every character is its own token (the regex isolates each one).
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, bos_token=BOS, eos_token=EOS, unk_token=UNK,
        clean_up_tokenization_spaces=False, model_input_names=["input_ids", "attention_mask"],
    )
    fast.padding_side = "left"  # generation batches left-pad prompts
    return fast
