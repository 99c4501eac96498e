"""The training processes of tests/test_distributed.py's batched runs (not a test itself): one
launch (torchrun_jobs.py) runs a JSON list of jobs, each {"argv": a `boundary train` command
line, "standin": whether TRL builds the stand-in engine of standin_engine.py where it builds
vLLM's}, one after another, each through the train stage's own `run` in every process, as the
workers of `boundary train --processes N` run it (stages/train.py). What the command's launch
adds around that (its checks, torchrun, the error relay) is tested through the command itself.
Rank 0 reports each job's stats."""

from __future__ import annotations

from torchrun_jobs import serve

from boundary.stages import train as train_stage
from boundary.training.launch import StopRequest


def main():
    stop = StopRequest().install()  # as a launched worker: a SIGTERM stops at a step boundary

    def run(job: dict) -> dict:
        if job.get("standin"):
            # As standin_site's sitecustomize does in a `boundary train` subprocess. It stays
            # patched for later jobs; it changes only the vllm engine's path, which they do not take.
            import standin_engine

            standin_engine.patch()
        return train_stage.run(job["argv"], stop=stop)

    serve(run)


if __name__ == "__main__":
    main()
