"""A randomly initialised tiny causal LM and word-level tokenizer, built without downloads.

It proposes nothing useful — that is its purpose: the end-to-end path (prompt → generation →
extraction → static gate → compile → verify → record) runs offline, in tests and on a GPU host
with no network, and every candidate it writes is recorded with its failure reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Whole-word vocabulary plus added tokens that hold newlines, so that random text sometimes
# forms a fenced block with an include and the entry point (and the reward varies in a group).
WORDS = "write a kernel the for with int M N K C A B { } ( ) ; return __global__ void"
ADDED = ['\n```cuda\n#include "gemmforge_abi.h"\n', "gemmforge_hgemm", "\n```\n"]
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"


def build_tiny_model(seed: int = 0) -> tuple[Any, Any]:
    """(model, tokenizer): a 2-layer Llama (hidden 32) that favours the code tokens."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        [WORDS], trainers.WordLevelTrainer(special_tokens=["<unk>", "<pad>", "<s>", "</s>"])
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
    )
    tokenizer.add_tokens(ADDED)
    tokenizer.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # favour the code tokens so that some answers hold code
        for token in ADDED:
            model.lm_head.weight[tokenizer.convert_tokens_to_ids(token)] *= 0
            model.lm_head.bias = None
        model.model.norm.weight.fill_(1.0)
    return model, tokenizer


def save_tiny_model(path: Path, seed: int = 0) -> Path:
    """Writes the tiny model and tokenizer to ``path`` (loadable as a local backend)."""
    model, tokenizer = build_tiny_model(seed)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


if __name__ == "__main__":
    import sys

    print(save_tiny_model(Path(sys.argv[1])))
