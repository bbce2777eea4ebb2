"""The predecessor's (vllm-hust-vSpec 0.14.3) config files, byte for byte as recorded in its
release (configs/NAME.toml): tests write them out and load them as a migrating user would."""

# ruff: noqa: E501  (recorded paths are long)

RECORDED_CONFIGS: dict[str, str] = {
    "qwen25-14b-05b": r"""[serve]
target_model = "/data/shared-models/Qwen2.5-14B-Instruct"
method = "draft"
served_model_name = "qwen2.5-14b-instruct-fp16"
gamma = 4
max_num_seqs = 128
max_num_batched_tokens = 8192
max_model_len = 32768
dtype = "float16"
block_size = 128
tensor_parallel_size = 1
draft_tensor_parallel_size = 1
gpu_memory_utilization = 0.85
host = "127.0.0.1"
port = 8000
device = "0"
graph_mode = "full-decode-only"
async_scheduling = true
prefix_caching = false
chunked_prefill = true
shared_tokenizer_padding = true
merged_full = true
merged_full_max_batch = 0
capture_policy = "auto"
disable_log_stats = true
vllm_source = "/root/data/vllm-hust-latest"
ascend_source = "/root/data/vllm-ascend-hust-latest"

[env]
VLLM_ASCEND_ENABLE_NZ = "0"
VLLM_ASCEND_TREE_DRAFT_DISABLE_STATS = "1"
VLLM_ASCEND_TORCH_PREFLIGHT = "0"
VLLM_NO_USAGE_STATS = "1"
PYTHONDONTWRITEBYTECODE = "1"
""",
    "qwen25-14b-05b-adaptive-b128": r"""[serve]
target_model = "/data/shared-models/Qwen2.5-14B-Instruct"
method = "draft"
served_model_name = "qwen2.5-14b-adaptive-draft"
gamma = 4
max_num_seqs = 128
max_num_batched_tokens = 33280
max_model_len = 1024
dtype = "bfloat16"
block_size = 128
tensor_parallel_size = 1
draft_tensor_parallel_size = 1
gpu_memory_utilization = 0.92
host = "127.0.0.1"
port = 8000
device = "2"
graph_mode = "full"
async_scheduling = true
prefix_caching = true
chunked_prefill = true
shared_tokenizer_padding = true
merged_full = true
merged_full_max_batch = 0
capture_policy = "exact"
disable_log_stats = true
adaptive_speculation = true
adaptive_policy = "online"
adaptive_min_gamma = 1
adaptive_control_interval = 2
adaptive_hysteresis = 0.05
adaptive_min_observations = 32
adaptive_max_gamma_step = 1
adaptive_latency_calibration = true
adaptive_latency_ewma_weight = 0.2
adaptive_gamma0_mode = "sticky"
adaptive_full_graph = true
adaptive_async = true
adaptive_online_window = 32
adaptive_online_exploration = 0.01
adaptive_online_warmup_samples = 1
adaptive_online_warmup_return = "best"
adaptive_refill_batch = 8

[env]
VLLM_ASCEND_ENABLE_NZ = "0"
VLLM_ASCEND_TREE_DRAFT_DISABLE_STATS = "1"
VLLM_ASCEND_TORCH_PREFLIGHT = "0"
VLLM_NO_USAGE_STATS = "1"
PYTHONDONTWRITEBYTECODE = "1"
""",
    "qwen25-14b-05b-arc-easy": r"""[serve]
target_model = "/model/Qwen2.5-14B-Instruct"
method = "draft"
served_model_name = "qwen2.5-14b-draft-vspec-fp16"
max_num_seqs = 16
max_num_batched_tokens = 8192
max_model_len = 32768
dtype = "float16"
block_size = 128
tensor_parallel_size = 1
draft_tensor_parallel_size = 1
gpu_memory_utilization = 0.85
host = "127.0.0.1"
port = 18180
graph_mode = "full-decode-only"
generation_config = "auto"
async_scheduling = false
prefix_caching = false
chunked_prefill = true
capture_policy = "auto"
disable_log_stats = false

[env]
VLLM_ASCEND_ENABLE_NZ = "0"
VLLM_ASCEND_TREE_DRAFT_DISABLE_STATS = "1"
VLLM_ASCEND_TORCH_PREFLIGHT = "0"
VLLM_NO_USAGE_STATS = "1"
PYTHONDONTWRITEBYTECODE = "1"
""",
    "qwen25-14b-eagle": r"""[serve]
target_model = "/data/shared-models/Qwen2.5-14B-Instruct"
method = "eagle"
served_model_name = "qwen2.5-14b-eagle-fp16"
gamma = 4
max_num_seqs = 128
max_num_batched_tokens = 8192
max_model_len = 32768
dtype = "float16"
block_size = 128
tensor_parallel_size = 1
draft_tensor_parallel_size = 1
gpu_memory_utilization = 0.85
host = "127.0.0.1"
port = 8000
device = "0"
graph_mode = "full"
async_scheduling = true
prefix_caching = true
chunked_prefill = true
capture_policy = "exact"
disable_log_stats = true
eagle_tree_width = 1
eagle_relaxed_accept_topk = 1
eagle_relaxed_accept_after_tokens = 0
eagle_spec_metadata_cache = false
eagle_uniform_state_kernel = false
graph_event_ordering = false
vllm_source = "/root/data/vllm-hust-latest"
ascend_source = "/root/data/vllm-ascend-hust-latest"

[env]
VLLM_ASCEND_ENABLE_NZ = "0"
VLLM_NO_USAGE_STATS = "1"
PYTHONDONTWRITEBYTECODE = "1"
""",
    "qwen25-14b-eagle-arc-easy": r"""[serve]
target_model = "/model/Qwen2.5-14B-Instruct"
method = "eagle"
served_model_name = "qwen2.5-14b-eagle-vspec-fp16"
max_num_seqs = 16
max_num_batched_tokens = 8192
max_model_len = 32768
dtype = "float16"
block_size = 128
tensor_parallel_size = 1
draft_tensor_parallel_size = 1
gpu_memory_utilization = 0.85
host = "127.0.0.1"
port = 18180
graph_mode = "full-decode-only"
generation_config = "auto"
async_scheduling = false
prefix_caching = false
chunked_prefill = true
capture_policy = "auto"
disable_log_stats = false
eagle_tree_width = 1
eagle_relaxed_accept_topk = 1

[env]
VLLM_ASCEND_ENABLE_NZ = "0"
VLLM_NO_USAGE_STATS = "1"
PYTHONDONTWRITEBYTECODE = "1"
""",
    "qwen25-14b-eagle-relaxed": r"""[serve]
target_model = "/data/shared-models/Qwen2.5-14B-Instruct"
method = "eagle"
served_model_name = "qwen2.5-14b-eagle-relaxed"
gamma = 3
max_num_seqs = 128
max_num_batched_tokens = 8192
max_model_len = 32768
dtype = "float16"
block_size = 128
tensor_parallel_size = 1
draft_tensor_parallel_size = 1
gpu_memory_utilization = 0.85
host = "127.0.0.1"
port = 8000
device = "0"
graph_mode = "full"
async_scheduling = true
prefix_caching = true
chunked_prefill = true
capture_policy = "exact"
disable_log_stats = true
eagle_draft_active_vocab_ids = "/root/data/vllm-ascend-hust/benchmark_results/eagle_graph_optimization/active_vocab_ids/sharegpt_targetargmax_p200_g3_16000.json"
eagle_target_active_vocab_ids = "/root/data/vllm-ascend-hust/benchmark_results/eagle_graph_optimization/active_vocab_ids/sharegpt_dataaware_22021_eagle_p200_g3.json"
eagle_relaxed_accept_topk = 3
eagle_relaxed_accept_after_tokens = 64
eagle_spec_metadata_cache = true
eagle_uniform_state_kernel = false
graph_event_ordering = true
vllm_source = "/root/data/vllm-hust-latest"
ascend_source = "/root/data/vllm-ascend-hust-latest"

[env]
VLLM_ASCEND_ENABLE_NZ = "0"
VLLM_NO_USAGE_STATS = "1"
PYTHONDONTWRITEBYTECODE = "1"
""",
    "qwen3-8b-eagle3": r"""[serve]
target_model = "/data/shared-models/Qwen3-8B"
draft_model = "/data/shared-models/qwen3_8b_eagle3"
method = "eagle3"
served_model_name = "qwen3-8b-eagle3"
gamma = 4
max_num_seqs = 128
max_num_batched_tokens = 8192
max_model_len = 32768
dtype = "float16"
block_size = 128
tensor_parallel_size = 1
draft_tensor_parallel_size = 1
gpu_memory_utilization = 0.85
host = "127.0.0.1"
port = 8000
device = "0"
graph_mode = "full"
async_scheduling = true
prefix_caching = true
chunked_prefill = true
capture_policy = "exact"
disable_log_stats = true
vllm_source = "/root/data/vllm-hust-latest"
ascend_source = "/root/data/vllm-ascend-hust-latest"

[env]
VLLM_ASCEND_ENABLE_NZ = "0"
VLLM_NO_USAGE_STATS = "1"
PYTHONDONTWRITEBYTECODE = "1"
""",
    "qwen35-35b-a3b-eagle3": r"""[serve]
target_model = "/workspace/models/Qwen3.5-35B-A3B"
draft_model = "/workspace/models/Qwen3.5-35B-A3B-Eagle3-Specforge"
method = "eagle3"
served_model_name = "qwen3.5-35b-a3b-eagle3"
gamma = 6
max_num_seqs = 16
max_num_batched_tokens = 8192
max_model_len = 262144
dtype = "bfloat16"
kv_cache_dtype = "auto"
block_size = 128
tensor_parallel_size = 2
draft_tensor_parallel_size = 1
gpu_memory_utilization = 0.90
host = "127.0.0.1"
port = 18185
device = "0,1"
graph_mode = "full-and-piecewise"
generation_config = "vllm"
async_scheduling = true
prefix_caching = true
chunked_prefill = true
language_model_only = true
capture_policy = "exact"
disable_log_stats = false
adaptive_speculation = true
adaptive_policy = "online"
adaptive_min_gamma = 1
adaptive_control_interval = 4
adaptive_hysteresis = 0.03
adaptive_max_gamma_step = 1
adaptive_latency_calibration = true
adaptive_full_graph = true
adaptive_async = true
adaptive_online_window = 32
adaptive_online_exploration = 0.0
adaptive_online_warmup_samples = 2
adaptive_online_warmup_return = "best"
adaptive_refill_batch = 4
graph_event_ordering = true
eagle_spec_metadata_cache = true
extra_args = [
  "--enable-expert-parallel",
  "--additional-config",
  '{"enable_cpu_binding":true,"enable_reduce_sample":true}',
]

[env]
VLLM_NO_USAGE_STATS = "1"
VLLM_USE_AOT_COMPILE = "0"
PYTHONDONTWRITEBYTECODE = "1"
VSPEC_EAGLE3_DRAFT_BLOCK_SIZE = "128"
VSPEC_EAGLE3_KV_GROUP_SIZE = "4"
HUST_VSPEC_EAGLE3_GROUP_TRACE = "1"
HUST_VSPEC_EAGLE3_GDN_METADATA_SHARE = "1"
HUST_VSPEC_EAGLE3_COHORT_REFILL = "1"
HUST_VSPEC_REFILL_EXPLORATION = "0.15"
HUST_VSPEC_REFILL_FUTURE_DISCOUNT = "1.0"
HUST_VSPEC_REFILL_HYSTERESIS = "0.03"
HUST_VSPEC_REFILL_MAX_HOLDS = "8"
VSPEC_EAGLE_PARALLEL_GRAPH_UPDATES = "4"
VSPEC_EAGLE_DRAFT_BODY_W8A16 = "1"
HUST_VSPEC_EAGLE3_REPLICATED_DRAFT_ARGMAX = "0"
""",
    "qwen35-35b-a3b-mtp2": r"""[serve]
target_model = "/workspace/models/Qwen3.5-35B-A3B"
method = "mtp"
served_model_name = "qwen3.5-35b-a3b-mtp2"
gamma = 6
max_num_seqs = 16
max_num_batched_tokens = 8192
max_model_len = 4096
dtype = "bfloat16"
block_size = 128
tensor_parallel_size = 2
gpu_memory_utilization = 0.90
host = "127.0.0.1"
port = 18185
device = "0,1"
graph_mode = "full-decode-only"
generation_config = "vllm"
async_scheduling = false
prefix_caching = false
chunked_prefill = true
language_model_only = true
capture_policy = "exact"
disable_log_stats = false
adaptive_speculation = true
adaptive_policy = "online"
adaptive_min_gamma = 2
adaptive_control_interval = 4
adaptive_hysteresis = 0.03
adaptive_max_gamma_step = 2
adaptive_latency_calibration = true
adaptive_full_graph = true
adaptive_async = true
adaptive_online_window = 32
adaptive_online_exploration = 0.0
adaptive_online_warmup_samples = 2
adaptive_online_warmup_return = "best"
adaptive_refill_batch = 8
mtp_strict_graph = true
mtp_local_argmax_reduction = false
vllm_source = "/root/data/vllm-hust-latest"
ascend_source = "/root/data/vllm-ascend-hust-latest"
extra_args = [
  "--enable-expert-parallel",
  "--additional-config",
  '{"enable_cpu_binding":true,"multistream_overlap_shared_expert":true}',
]

[env]
HCCL_BUFFSIZE = "1024"
HCCL_OP_EXPANSION_MODE = "AIV"
VLLM_NO_USAGE_STATS = "1"
PYTHONDONTWRITEBYTECODE = "1"
PYTORCH_NPU_ALLOC_CONF = "expandable_segments:True"
HUST_VSPEC_MTP_COHORT_REFILL = "1"
HUST_VSPEC_REFILL_EXPLORATION = "0.15"
HUST_VSPEC_REFILL_FUTURE_DISCOUNT = "1.0"
HUST_VSPEC_REFILL_HYSTERESIS = "0.03"
HUST_VSPEC_REFILL_MAX_HOLDS = "8"
""",
    "qwen35-35b-a3b-frontier-mtp2": r"""[serve]
target_model = "/workspace/models/Qwen3.5-35B-A3B"
method = "mtp"
served_model_name = "qwen3.5-35b-a3b-frontier-mtp2"
gamma = 6
max_num_seqs = 16
max_num_batched_tokens = 8192
max_model_len = 262144
dtype = "bfloat16"
kv_cache_dtype = "auto"
block_size = 128
tensor_parallel_size = 2
gpu_memory_utilization = 0.90
host = "127.0.0.1"
port = 18185
device = "0,1"
graph_mode = "full-and-piecewise"
generation_config = "vllm"
async_scheduling = true
prefix_caching = true
chunked_prefill = true
language_model_only = true
capture_policy = "exact"
disable_log_stats = false
adaptive_speculation = true
adaptive_policy = "online"
adaptive_min_gamma = 2
adaptive_control_interval = 4
adaptive_hysteresis = 0.03
adaptive_max_gamma_step = 2
adaptive_latency_calibration = true
adaptive_full_graph = true
adaptive_async = true
adaptive_online_window = 32
adaptive_online_exploration = 0.0
adaptive_online_warmup_samples = 2
adaptive_online_warmup_return = "best"
adaptive_refill_batch = 8
mtp_strict_graph = true
mtp_local_argmax_reduction = false
extra_args = [
  "--enable-expert-parallel",
  "--additional-config",
  '{"enable_cpu_binding":true}',
]

[env]
HCCL_BUFFSIZE = "1024"
HCCL_OP_EXPANSION_MODE = "AIV"
VLLM_NO_USAGE_STATS = "1"
PYTHONDONTWRITEBYTECODE = "1"
PYTORCH_NPU_ALLOC_CONF = "expandable_segments:True"
HUST_VSPEC_MTP_COHORT_REFILL = "1"
HUST_VSPEC_REFILL_EXPLORATION = "0.15"
HUST_VSPEC_REFILL_FUTURE_DISCOUNT = "1.0"
HUST_VSPEC_REFILL_HYSTERESIS = "0.03"
HUST_VSPEC_REFILL_MAX_HOLDS = "8"
""",
}
