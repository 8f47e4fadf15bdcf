#!/usr/bin/env python3
"""Write a model folder that an inference engine can serve with dummy (random) weights.

The folder holds:
  config.json             a Llama-architecture config (default: the SmolLM2-135M shape)
  generation_config.json  bos/eos ids only, so the engine adds no sampling defaults
  tokenizer.json          a synthetic WordLevel tokenizer: every word "w<N>" is token N
  tokenizer_config.json   special tokens and a chat template (so /v1/chat/completions works)

No weights are written and nothing is downloaded: the engine is started with
--load-format dummy. The output is deterministic (same arguments, same bytes).

A text prompt of k whitespace-separated words "w<N>" (9 <= N < vocab) is exactly k
prompt tokens; so is a list of token ids.

Needs the `tokenizers` package only when --check is given (the engine venv has it);
tokenizer.json is written as plain JSON.

Usage: python make_model.py [--out DIR] [--layers 30] [--hidden 576] ... [--check]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

SPECIAL = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
UNK, BOS, EOS, IM_START, IM_END = range(len(SPECIAL))
ROLES = ["system", "user", "assistant", "tool"]  # ordinary words, so chat turns have no <unk>
FIRST_WORD = len(SPECIAL) + len(ROLES)  # "w9" is the first synthetic word

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + ' ' + message['content'] + ' <|im_end|> ' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant ' }}{% endif %}"
)


def word(i: int) -> str:
    if i < len(SPECIAL):
        return SPECIAL[i]
    if i < FIRST_WORD:
        return ROLES[i - len(SPECIAL)]
    return f"w{i}"


def llama_config(a: argparse.Namespace) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": a.hidden,
        "intermediate_size": a.intermediate,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": a.hidden // a.heads,
        "vocab_size": a.vocab,
        "max_position_embeddings": a.max_pos,
        "rope_theta": 100000.0,
        "rope_scaling": None,
        "rms_norm_eps": 1e-05,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "tie_word_embeddings": True,
        "torch_dtype": a.dtype,
        "use_cache": True,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": None,
    }


def tokenizer_json(vocab: int) -> dict:
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": s, "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True}
            for i, s in enumerate(SPECIAL)
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        # WordPiece's decoder with an unused prefix joins tokens with single spaces.
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": False},
        "model": {
            "type": "WordLevel",
            "vocab": {word(i): i for i in range(vocab)},
            "unk_token": "<unk>",
        },
    }


def tokenizer_config(max_pos: int) -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<unk>",
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_pos,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(i): {"content": s, "lstrip": False, "normalized": False,
                     "rstrip": False, "single_word": False, "special": True}
            for i, s in enumerate(SPECIAL)
        },
    }


def write_json(path: str, obj: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")


def check(out: str, vocab: int) -> None:
    from tokenizers import Tokenizer  # engine venv only

    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    ids = tok.encode("user w9 w10 " + word(vocab - 1)).ids
    assert ids == [6, 9, 10, vocab - 1], ids
    assert tok.decode([9, 10, 11]) == "w9 w10 w11", tok.decode([9, 10, 11])
    assert tok.get_vocab_size() == vocab
    print(f"tokenizer check ok: vocab {vocab}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.environ.get("ENGINE_MODEL_DIR") or os.path.join(here, "..", "..", ".engine", "model")
    p.add_argument("--out", default=default_out,
                   help="model folder (default: $ENGINE_MODEL_DIR or .engine/model in the repo root)")
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--hidden", type=int, default=576)
    p.add_argument("--heads", type=int, default=9)
    p.add_argument("--kv-heads", type=int, default=3)
    p.add_argument("--intermediate", type=int, default=1536)
    p.add_argument("--vocab", type=int, default=49152)
    p.add_argument("--max-pos", type=int, default=8192)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--check", action="store_true", help="load the tokenizer back with `tokenizers` and test it")
    a = p.parse_args(argv)
    if a.hidden % a.heads or a.heads % a.kv_heads or a.vocab <= FIRST_WORD:
        p.error("hidden must divide by heads, heads by kv-heads, and vocab exceed the special tokens")

    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    write_json(os.path.join(out, "config.json"), llama_config(a))
    write_json(os.path.join(out, "generation_config.json"),
               {"bos_token_id": BOS, "eos_token_id": EOS, "_from_model_config": True})
    write_json(os.path.join(out, "tokenizer.json"), tokenizer_json(a.vocab))
    write_json(os.path.join(out, "tokenizer_config.json"), tokenizer_config(a.max_pos))
    write_json(os.path.join(out, "special_tokens_map.json"),
               {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<unk>"})
    print(f"model folder: {out} (Llama, {a.layers} layers, hidden {a.hidden}, "
          f"{a.heads}/{a.kv_heads} heads, intermediate {a.intermediate}, vocab {a.vocab})")
    if a.check:
        check(out, a.vocab)
    return 0


if __name__ == "__main__":
    sys.exit(main())
