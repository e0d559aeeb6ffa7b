#!/bin/sh
# The seed001 validation server (CLIP, IQA, LPIPS: 4.7 GB), started outside vramd like the
# seed's `python serve.py --port 10006`; vramd.yaml reaches it by url: and uses its
# /unload_models/ and /reload_models/ endpoints. Needs SIMGPU (and SIMGPU_TIMESCALE) set.
exec simworker --port 10006 --name validation \
  --resident 4.4GiB --load-time 8s --unload-time 1s --unload-residue 300MiB \
  --per-request 256MiB --run-time 2.7s --run-jitter 0.87 --cache release \
  --output json --path /validate_txt_to_3d_ply/ "$@"
