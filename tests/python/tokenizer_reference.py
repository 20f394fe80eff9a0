#!/usr/bin/env python3
"""Hugging Face tokenizers (PyPI) as the reference for trainer's tokenizer.json support.

  tokenizer_reference.py train-llama3 OUT_JSON CORPUS_JSONL   a Llama-3-style byte-level BPE
      (Split by Llama 3's regex, Isolated; ByteLevel without regex; ignore_merges; special
      tokens as added tokens) trained on the texts of CORPUS_JSONL ({"text": ...} per line)
  tokenizer_reference.py encode TOKENIZER_JSON TEXTS_JSONL     one line of ids per text
"""
import json, sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def texts(path):
    return [json.loads(line)["text"] for line in open(path, encoding="utf-8") if line.strip()]


def train_llama3(out, corpus):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts(corpus) * 3, trainer)
    tok.save(out)


def encode(tokenizer, path):
    tok = Tokenizer.from_file(tokenizer)
    for text in texts(path):
        print(" ".join(str(i) for i in tok.encode(text, add_special_tokens=False).ids))


if __name__ == "__main__":
    {"train-llama3": train_llama3, "encode": encode}[sys.argv[1]](*sys.argv[2:])
