#!/usr/bin/env python3
"""The Hugging Face side of examples/hf_gpt2_test.sh (needs torch and transformers).

  hf_gpt2_check.py make DIR
      A randomly initialised GPT2LMHeadModel (the config below, torch seed 0) saved by
      save_pretrained(DIR) (DIR/model.safetensors, lm_head tied to wte and so not stored), and
      DIR/train.bin: 2000 uint16 token ids in [0, 300) (nanoGPT's raw format), seeded.
  hf_gpt2_check.py batch MODEL TOKENS B T
      The mean cross-entropy of MODEL (a save_pretrained folder) over the first step's batch of
      train_gpt --data-order sequential --batch B --block-size T: sequences j = 0..B-1 starting at
      (j*T) mod (N - T), inputs tokens[o:o+T], targets tokens[o+1:o+T+1].
  hf_gpt2_check.py eval FILE TOKENS T
      Loads FILE (a safetensors state_dict, e.g. `ckpt export --layout hf`) into GPT2LMHeadModel
      with strict=True and prints the mean cross-entropy over the windows o = k*T,
      k < floor((N - 1) / T) (train_gpt's evaluation).
Prints one number.
"""
import sys

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel

VOCAB, N_EMBD, N_LAYER, N_HEAD, N_POS = 300, 32, 2, 2, 16


def config():
    return GPT2Config(vocab_size=VOCAB, n_positions=N_POS, n_embd=N_EMBD, n_layer=N_LAYER,
                      n_head=N_HEAD, activation_function="gelu_new", resid_pdrop=0.0,
                      embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
                      tie_word_embeddings=True, bos_token_id=0, eos_token_id=0)


def mean_ce(model, starts, tokens, t):
    x = torch.tensor(np.stack([tokens[o:o + t] for o in starts]).astype(np.int64))
    y = torch.tensor(np.stack([tokens[o + 1:o + t + 1] for o in starts]).astype(np.int64))
    with torch.no_grad():
        logits = model(x).logits.double()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1)).item()


def main():
    mode = sys.argv[1]
    if mode == "make":
        torch.manual_seed(0)
        model = GPT2LMHeadModel(config())
        model.save_pretrained(sys.argv[2], safe_serialization=True)
        rng = np.random.default_rng(5)
        rng.integers(0, VOCAB, 2000).astype("<u2").tofile(sys.argv[2] + "/train.bin")
        return
    tokens = np.fromfile(sys.argv[3], dtype="<u2").astype(np.int64)
    n = len(tokens)
    if mode == "batch":
        model = GPT2LMHeadModel.from_pretrained(sys.argv[2]).eval()
        b, t = int(sys.argv[4]), int(sys.argv[5])
        print(repr(mean_ce(model, [(j * t) % (n - t) for j in range(b)], tokens, t)))
    elif mode == "eval":
        model = GPT2LMHeadModel(config()).eval()
        model.load_state_dict(load_file(sys.argv[2]), strict=True)
        t = int(sys.argv[4])
        print(repr(mean_ce(model, [k * t for k in range((n - 1) // t)], tokens, t)))
    else:
        sys.exit("unknown mode " + mode)


if __name__ == "__main__":
    main()
