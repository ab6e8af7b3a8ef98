#!/usr/bin/env bash
# An MPS control daemon of our own, for A/B tests of many verifiers sharing the GPU (issue 7).
# Its pipe folder is not the default one, so only processes given CUDA_MPS_PIPE_DIRECTORY
# become its clients; every other process keeps its own context, time-sliced as before.
#   bash bench/mps.sh start DIR   → prints the pipe folder (the last line) once the daemon answers
#   bash bench/mps.sh stop DIR
set -uo pipefail
action=${1:?start or stop}; dir=${2:?a folder for the pipe and the log}
export CUDA_MPS_PIPE_DIRECTORY=$dir/pipe CUDA_MPS_LOG_DIRECTORY=$dir/log
case $action in
  start)
    command -v nvidia-cuda-mps-control >/dev/null || { echo "no nvidia-cuda-mps-control" >&2; exit 1; }
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d || exit 1
    for _ in $(seq 50); do
      echo get_server_list | nvidia-cuda-mps-control >/dev/null 2>&1 && break
      sleep 0.1
    done
    echo "mps control daemon: $(pgrep -f nvidia-cuda-mps-control | head -1)"
    echo "$CUDA_MPS_PIPE_DIRECTORY"
    ;;
  stop)
    echo quit | nvidia-cuda-mps-control
    cat "$CUDA_MPS_LOG_DIRECTORY"/*.log 2>/dev/null | tail -20
    ;;
  *) echo "usage: bash bench/mps.sh start|stop DIR" >&2; exit 2 ;;
esac
