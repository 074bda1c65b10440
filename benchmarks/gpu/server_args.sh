# Sourced by the GPU scripts that start SGLang servers for the serving A/Bs (ab_common.sh, so ab_design.sh and
# ab_runs.sh) and for their kernel profile (moe_profile.sh): one set of server arguments for all of them.
# Every arm of every A/B: SGLang's Triton attention (the kit has no FA3), no grammar backend, decode graphs up to
# batch 64.
SERVER_ARGS=(--attention-backend triton --sampling-backend pytorch --grammar-backend none
             --cuda-graph-max-bs-decode 64)
# The one-request stages' servers (both arms alike): decode graphs up to batch 2, none for prefill. Their client
# decodes at batch 1; its first tokens take 7-11% of each request (2x H200, serving/mixtral-ab), the prefill's
# config the same in both arms (B's differ at keys 1 and 64 only; a 128-token prefill reads key 128). Graphs for
# 12 decode batch sizes and 58 prefill token counts of a 32-layer model made each start longer (the first, 173 s;
# the prefill capture alone took 55.9 s of a fresh machine's first start of the 8-layer dense model, ab_common.sh),
# and starts bound the periods a call holds.
ONE_SERVER=(--moe-runner-backend triton --cuda-graph-max-bs-decode 2 --disable-prefill-cuda-graph)
# (given after SERVER_ARGS: SGLang's parser keeps the last --cuda-graph-max-bs-decode, 2)
