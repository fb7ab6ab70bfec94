#!/usr/bin/env bash
# tiny_config.sh FAMILY: an HF config.json for a tiny model of FAMILY (llama or qwen2) in the
# tiny-dense preset's shape (vocabulary 512 for the byte tokenizer, hidden 64, 3 layers, 4 heads
# of 16, 2 kv heads), as those families' config.json files spell it:
#   llama: Llama 3.x, untied, rope_theta 500000 with rope_type llama3 scaling whose
#          original_max_position_embeddings 256 puts RoPE's 8 wavelengths in all three of its
#          bands (kept < 64, blended 64-256, stretched > 256);
#   qwen2: Qwen2.5, tied, sliding window off, q/k/v biases (the architecture's, no key).
set -euo pipefail
shape='"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 4096,
  "rms_norm_eps": 1e-06, "hidden_act": "silu", "attention_dropout": 0.0'
case ${1:-} in
  llama)
    printf '{"model_type": "llama", "architectures": ["LlamaForCausalLM"], %s, "tie_word_embeddings": false,
  "attention_bias": false, "mlp_bias": false, "pretraining_tp": 1, "rope_theta": 500000.0,
  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 256}}\n' "$shape" ;;
  qwen2)
    printf '{"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], %s, "tie_word_embeddings": true,
  "rope_theta": 1000000.0, "use_sliding_window": false, "sliding_window": 4096, "max_window_layers": 3}\n' "$shape" ;;
  *) echo "tiny_config.sh: FAMILY must be llama or qwen2, got '${1:-}'" >&2; exit 2 ;;
esac
