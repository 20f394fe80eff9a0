#!/usr/bin/env python3
"""Hugging Face tokenizers (PyPI) as the reference for trainer's tokenizer.json support.

  tokenizer_reference.py train-llama3 OUT_JSON CORPUS_JSONL   a Llama-3-style byte-level BPE
      (Split by Llama 3's regex, Isolated; ByteLevel without regex; ignore_merges; special
      tokens as added tokens) trained on the texts of CORPUS_JSONL ({"text": ...} per line)
  tokenizer_reference.py reorder MODE IN_JSON OUT_JSON   the same vocabulary with merges that are
      not in the order they were learned, as in Meta's Llama 3 tokenizer.json; prints how many
      merges use a token that only a later merge creates. MODE tiktoken: the merges regenerated
      from the token ranks (ids) the way transformers' TikTokenConverter does (every split of a
      token into two tokens, ordered by the token's rank); MODE reversed-blocks: blocks of 16
      merges each reversed
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


def tiktoken_merges(vocab):
    """transformers' generate_merges over ranks: for each token by rank, each split into two
    tokens of the vocabulary, ordered by the ranks of the parts."""
    merges = []
    for token, rank in sorted(vocab.items(), key=lambda kv: kv[1]):
        splits = [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in vocab and token[i:] in vocab]
        merges.extend(sorted(splits, key=lambda lr: (vocab[lr[0]], vocab[lr[1]])))
    return merges


def out_of_order(merges):
    """Merges that use a token whose last creating merge comes at or after them."""
    created = {}
    for rank, (left, right) in enumerate(merges):
        created[left + right] = rank
    return sum(1 for rank, (left, right) in enumerate(merges)
               if created.get(left, -1) >= rank or created.get(right, -1) >= rank)


def reorder(mode, src, out):
    data = json.load(open(src, encoding="utf-8"))
    model = data["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    if mode == "tiktoken":
        merges = tiktoken_merges(model["vocab"])
    elif mode == "reversed-blocks":
        merges = [m for i in range(0, len(merges), 16) for m in reversed(merges[i:i + 16])]
    else:
        raise SystemExit("unknown mode " + mode)
    model["merges"] = [list(m) for m in merges]
    json.dump(data, open(out, "w", encoding="utf-8"), ensure_ascii=False)
    Tokenizer.from_file(out)  # tokenizers must load it
    print(out_of_order(merges))


def encode(tokenizer, path):
    tok = Tokenizer.from_file(tokenizer)
    for text in texts(path):
        print(" ".join(str(i) for i in tok.encode(text, add_special_tokens=False).ids))


if __name__ == "__main__":
    {"train-llama3": train_llama3, "reorder": reorder, "encode": encode}[sys.argv[1]](*sys.argv[2:])
