"""``make demo``: the whole story on embedded AWS (moto), step by step, without an AWS account.

Synthesizes the dev stage with fast timeouts, stands every stack up on moto, runs the seeds'
story through the REST and WebSocket APIs built from the templates, and prints each step: what
was called and what changed, then a short summary. Bedrock is stubbed at the client: the
functions really call bedrock-runtime Converse on the stage's model, answered in-process (echo
replies to chat, a fixed text to summarisation requests).
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from typing import TextIO

from embedded.offline import go_offline

# The handlers' own lines (their logs, their metrics' EMF lines) would drown the narration: they
# go to each invocation's output only (``function_logs`` below). Metrics stay on, because the
# story reads the handoff metrics from the functions' EMF lines, as CloudWatch would.
go_offline(AWS_LAMBDA_LOG_LEVEL="ERROR", POWERTOOLS_METRICS_DISABLED="false")

from embedded import embedded_stage  # noqa: E402
from embedded.clock import _REAL_TIME  # noqa: E402
from embedded.function_logs import function_logs  # noqa: E402
from local.story import STEPS, Step, StoryError, run_story  # noqa: E402
from local.story.stage import story_config, story_stage  # noqa: E402 - after the environment is set


def _print_step(index: int, step: Step, out: TextIO) -> None:
    print(f"\n[{index:2d}/{len(STEPS)}] {step.title}  ({step.seconds:.1f}s)", file=out)
    for call in step.calls:
        print(f"        called  {call}", file=out)
    for change in step.changes:
        print(f"        changed {change}", file=out)


def main() -> int:
    warnings.filterwarnings("ignore")
    logging.getLogger("moto").setLevel(logging.CRITICAL)
    started = _REAL_TIME()
    print("MangaAssist on embedded AWS (moto): the synthesized templates, no account needed.")
    synthesized = story_stage()
    print(f"Synthesized stage {story_config().name} in {_REAL_TIME() - started:.1f}s")
    counter = iter(range(1, len(STEPS) + 1))
    with embedded_stage(synthesized.assembly_dir) as stage:
        deployed = stage.describe()
        resources = sum(sum(types.values()) for types in deployed["stacks"].values())
        print(
            f"Deployed {resources} resources of {len(deployed['stacks'])} stacks on moto "
            f"({len(deployed['mappings'])} event source mappings, {deployed['policies']} policies enforced on every "
            f"call, {deployed['passive']} passive resources such as alarms) in {_REAL_TIME() - started:.1f}s"
        )
        print(
            f"Bedrock: {story_config().bedrock_model_id} stubbed at the client "
            "(Converse answered in-process: echo replies to chat, a fixed summary text)"
        )
        try:
            out = sys.stdout
            with function_logs():
                story = run_story(stage, story_config(), lambda step: _print_step(next(counter), step, out))
        except StoryError as error:
            print(f"\nFAILED: {error}")
            return 1
        invocations = len(stage.calls.calls)
        handlers = len({call.handler for call in stage.calls.calls})
        stream = len(stage.streams.deliveries)
        queues = len(stage.queues.deliveries)
        rest = len(stage.rest.log)
        converse = len(stage.bedrock.calls)
        decided = len(stage.guard.decided) if stage.guard else 0
        refused = len(stage.refusals)
    print(
        f"\nSummary: {len(story.steps)} steps passed in {_REAL_TIME() - started:.1f}s; "
        f"{invocations} Lambda invocations of {handlers} handlers, {stream} stream batches, "
        f"{queues} queue batches, {rest} REST requests, {converse} stubbed Bedrock calls; {decided} authorization "
        f"decisions, {refused} refused; simulated clock moved {stage.clock.offset / 3600:.1f}h."
    )
    return 0


if __name__ == "__main__":
    start = time.monotonic()
    code = main()
    sys.exit(code)
