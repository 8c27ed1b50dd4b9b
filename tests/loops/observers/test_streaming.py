"""`dspy.streamify` over a loop (`loops.observers.streaming`): each role's chosen fields as its model writes them, in
the format that role answers in (chat markers, JSON, the plain text of a small model), status messages for each step of
the run, and the `LoopResult` last; on a scripted streaming LM, a served model streaming server-sent events, and the
embedded model."""

from __future__ import annotations

import asyncio
import re
import time

import dspy
import pytest
from dspy.lm15 import Config, Message, Request
from dspy.streaming import StatusMessage, StreamListener, StreamResponse

import loops.sexp
from loops import CreatorCriticIterator, LoopResult, Refine, StatusMessages
from loops.lm import MODEL, AsyncLlamaEngine, LlamaEngine, local_lm, resolve
from loops.vocabulary.profile import with_adapter, with_size
from tests.loops.fake_openai import faulty_openai
from tests.scripted import streaming_lm


def created(draft):
    return {"reasoning": "plan", "draft": draft}


def approves(text):
    return lambda requirements, draft, iteration: draft == text


def streamed_run(loop, listeners, *, asynchronous, **inputs):
    """What `dspy.streamify` yields for one call of `loop`: through `forward` on a worker thread, read by a
    synchronous generator, or through `aforward`, read by an async one."""
    if not asynchronous:
        return list(dspy.streamify(loop, stream_listeners=listeners, async_streaming=False)(**inputs))

    async def read():
        streamed = dspy.streamify(loop, stream_listeners=listeners, is_async_program=True)
        return [item async for item in streamed(**inputs)]

    return asyncio.run(read())


def field_text(received, field):
    return "".join(item.chunk for item in received if isinstance(item, StreamResponse)
                   and item.signature_field_name == field)


def statuses(received):
    """The status messages received, their durations as "Ns" (what a loaded machine makes of them varies)."""
    return [re.sub(r"\d+\.\ds\b", "Ns", item.message) for item in received if isinstance(item, StatusMessage)]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_each_role_says_its_status_in_order_and_its_fields_stream_before_the_result(asynchronous):
    loop = CreatorCriticIterator(max_iterations=2, critic=approves("short"))
    script = [created("a long first draft"), {"improved_draft": "short"}]
    with dspy.context(lm=streaming_lm(script)):
        received = streamed_run(loop, [StreamListener("draft"), StreamListener("improved_draft")],
                                asynchronous=asynchronous, requirements="Write.")

    assert isinstance(received[-1], LoopResult) and received[-1].final == "short"
    assert (field_text(received, "draft"), field_text(received, "improved_draft")) == ("a long first draft", "short")
    assert statuses(received) == [
        "creator: writing reasoning, draft (iteration 1)", "creator: done in Ns",
        "critic: running (iteration 1)", "critic: done in Ns",
        "iterator: writing improved_draft (iteration 2)", "iterator: done in Ns",
        "critic: running (iteration 2)", "critic: done in Ns",
        "finished: approved after 2 iteration(s)",
    ]
    first_chunk = next(index for index, item in enumerate(received) if isinstance(item, StreamResponse))
    assert statuses(received[:first_chunk]) == ["creator: writing reasoning, draft (iteration 1)"]


def test_a_small_models_plain_text_answer_streams_as_its_field():
    """A small model's creator answers in plain text, no field markers: every piece of it is the draft's."""
    lm = with_size(streaming_lm(["  A plain draft, written freely.\n"]), "small")
    loop = CreatorCriticIterator(max_iterations=1, critic=approves("A plain draft, written freely."))
    with dspy.context(lm=lm):
        received = streamed_run(loop, [StreamListener("draft")], asynchronous=False, requirements="Write.")

    pieces = [item for item in received if isinstance(item, StreamResponse)]
    assert len(pieces) > 3 and pieces[-1].is_last_chunk and not any(piece.is_last_chunk for piece in pieces[:-1])
    assert field_text(received, "draft") == received[-1].final == "A plain draft, written freely."
    assert received[-1].success


def test_a_role_answering_in_json_streams_its_field_whatever_adapter_the_caller_set():
    """The listener reads each role's answer in the adapter that role answers in (here compact JSON), not the
    caller's context's (DSPy's chat adapter by default)."""
    lm = with_adapter(streaming_lm(['{"reasoning": "plan", "draft": "a JSON draft"}']), "compact")
    loop = CreatorCriticIterator(max_iterations=1, critic=approves("a JSON draft"))
    with dspy.context(lm=lm):
        received = streamed_run(loop, [StreamListener("draft")], asynchronous=True, requirements="Write.")
    assert field_text(received, "draft") == received[-1].final == "a JSON draft"


def test_refine_streams_every_attempt_of_a_users_program_and_says_the_checks():
    refine = Refine("question -> answer", checks=["max-words=1"])
    with dspy.context(lm=streaming_lm([{"answer": "two words"}, {"answer": "one"}])):
        received = streamed_run(refine, [StreamListener("answer", allow_reuse=True)], asynchronous=False,
                                question="A word?")
    assert field_text(received, "answer") == "two wordsone"
    said = statuses(received)
    assert said[:3] == ["program: writing answer (iteration 1)", "program: done in Ns", "checks: 0 of 1 held"]
    assert "checks: 1 of 1 held" in said and said[-1] == "finished: approved after 2 iteration(s)"
    assert received[-1].final == "one"


class Terse(StatusMessages):
    def role_start_status_message(self, call, fields):
        return f"{call.role} #{call.iteration}"

    def role_end_status_message(self, call, step, error):
        return None


def test_a_status_message_provider_of_ones_own_shapes_the_messages():
    loop = CreatorCriticIterator(max_iterations=2, critic=approves("short"))
    streamed = dspy.streamify(loop, status_message_provider=Terse(), async_streaming=False)
    with dspy.context(lm=streaming_lm([created("long"), {"improved_draft": "short"}])):
        received = list(streamed(requirements="Write."))
    assert statuses(received) == ["creator #1", "critic #1", "iterator #2", "critic #2",
                                  "finished: approved after 2 iteration(s)"]


def test_nothing_is_said_or_wrapped_when_nothing_streams():
    loop = CreatorCriticIterator(max_iterations=1, critic=approves("short"))
    with dspy.context(lm=streaming_lm([created("short")])):
        result = loop(requirements="Write.")
    assert result.final == "short" and dspy.settings.send_stream is None


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_served_model_streams_its_server_sent_events_with_their_usage(asynchronous):
    with faulty_openai() as server:
        lm = resolve("openai/served", api_base=server.base_url())
        loop = CreatorCriticIterator(max_iterations=1, critic=approves("a draft"))
        with dspy.context(lm=lm):
            received = streamed_run(loop, [StreamListener("draft")], asynchronous=asynchronous,
                                    requirements=f"Write ({'async' if asynchronous else 'sync'}).")
    pieces = [item for item in received if isinstance(item, StreamResponse)]
    assert len(pieces) > 1 and field_text(received, "draft") == received[-1].final == "a draft"
    assert received[-1].success and received[-1].tokens > 0, "the usage of the stream's last event is counted"
    assert server.received["t"] == 1


class SlowLlama:
    """Stands in for `llama_cpp.Llama`: streams a token every `pause_s`, for as long as it is read."""

    n_tokens = 0

    def __init__(self, pause_s):
        self.pause_s = pause_s

    def create_chat_completion(self, messages, stream=False, **options):
        assert stream, "a run with a deadline generates token by token"

        def chunks():
            while True:
                time.sleep(self.pause_s)
                yield {"choices": [{"delta": {"content": "word "}, "finish_reason": None}]}

        return chunks()

    def tokenize(self, text, add_bos=False, special=False):
        return text.split()


def test_a_streamed_embedded_generation_still_stops_at_the_runs_deadline():
    engine = LlamaEngine(SlowLlama(0.05))
    lm = dspy.LM("local/slow", engine=engine, cache=False)
    loop = CreatorCriticIterator(max_iterations=1, critic=approves("never"))
    started = time.monotonic()
    with dspy.context(lm=lm):
        received = streamed_run(loop, [StreamListener("draft")], asynchronous=False, requirements="Write.",
                                timeout_s=1.0)
    assert received[-1].stop_reason == "timeout" and time.monotonic() - started < 10


@pytest.mark.embedded
def test_the_embedded_model_streams_its_draft_token_by_token_as_it_writes_it():
    """Greedy decoding: the streamed pieces join into the draft, the same draft as without streaming."""
    loop = CreatorCriticIterator(max_iterations=1, critic=approves("never"))
    with dspy.context(lm=local_lm(max_tokens=40)):
        received = streamed_run(loop, [StreamListener("draft")], asynchronous=False,
                                requirements="A slogan for a bakery.")
        unstreamed = loop(requirements="A slogan for a bakery.")

    final = received[-1]
    pieces = [item for item in received if isinstance(item, StreamResponse)]
    assert isinstance(final, LoopResult) and len(pieces) > 1
    draft = final.trace[0].outputs["draft"]
    assert field_text(received, "draft") == draft == unstreamed.trace[0].outputs["draft"] != ""
    said = statuses(received)
    assert [message.split(":")[0] for message in said] == ["creator", "creator", "critic", "critic", "finished"]
    assert said.index("creator: writing reasoning, draft (iteration 1)") < received.index(pieces[0])


def test_a_dsl_program_compiled_to_a_module_streams_its_atoms_fields_within_its_loop_form():
    program = loops.sexp.compile("examples/creator_critic.sexp")
    script = [{"draft": "Sip on the go, wherever the long road takes you, with a reusable water bottle"},
              {"revised": "Sip anywhere: your reusable water bottle"}]
    with dspy.context(lm=streaming_lm(script)):
        received = streamed_run(program, [StreamListener("draft"), StreamListener("revised")], asynchronous=True,
                                product="a reusable water bottle", **{"max-words": 12})

    assert (field_text(received, "draft"), field_text(received, "revised")) == (script[0]["draft"],
                                                                                 script[1]["revised"])
    assert received[-1].success and received[-1].result == "Sip anywhere: your reusable water bottle"
    said = statuses(received)
    assert said.index("creator: running (iteration 1)") < said.index("user:create: writing draft (iteration 1)")
    assert said.index("user:revise: writing revised (iteration 2)") < said.index("critic: running (iteration 2)")


def test_a_server_that_streams_no_usage_is_said_once_and_its_tokens_are_not_counted():
    with faulty_openai() as server:
        server.stream_usage = False
        lm = resolve("openai/served", api_base=server.base_url())
        loop = CreatorCriticIterator(max_iterations=1, critic=approves("a draft"))
        with dspy.context(lm=lm):
            received = streamed_run(loop, [StreamListener("draft")], asynchronous=False,
                                    requirements="Write, with no usage.")  # a request DSPy's cache has not seen
    result = received[-1]
    assert result.final == "a draft" and result.tokens == 0 and server.received["t"] == 1
    assert sum("streams no token usage" in warning for warning in result.warnings) == 1, result.warnings


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_served_stream_refused_for_its_schema_is_sent_again_and_one_that_hangs_ends_at_the_deadline(asynchronous):
    with faulty_openai() as server:
        server.hang_s = 5.0
        server.faults = {("refused", 1): "schema_refusal", ("hangs", 1): "hang"}
        loop = CreatorCriticIterator(max_iterations=1, critic=approves("a draft"))
        with dspy.context(lm=resolve("openai/served", api_base=server.base_url("refused"))):
            refused = streamed_run(loop, [StreamListener("draft")], asynchronous=asynchronous,
                                   requirements=f"Write, refused ({asynchronous}).")
        started = time.monotonic()
        with dspy.context(lm=resolve("openai/served", api_base=server.base_url("hangs"))):
            hung = streamed_run(loop, [StreamListener("draft")], asynchronous=asynchronous,
                                requirements=f"Write, hanging ({asynchronous}).", timeout_s=0.5)
        waited = time.monotonic() - started

    assert field_text(refused, "draft") == refused[-1].final == "a draft" and server.received["refused"] == 2
    assert hung[-1].stop_reason == "timeout" and waited < 4.0


@pytest.mark.embedded
@pytest.mark.parametrize("asynchronous", [False, True])
async def test_the_embedded_engines_streamed_pieces_join_into_the_answer_it_gives_whole(asynchronous):
    """Greedy decoding, the same request: streamed or not, the same text and the same usage."""
    engine = LlamaEngine()
    request = Request(model=MODEL, messages=(Message.user("Name three colours of the sea."),),
                      config=Config(max_tokens=24, temperature=0.0))
    whole = engine.complete(request)
    if asynchronous:
        events = [event async for event in AsyncLlamaEngine(engine).stream(request)]
    else:
        events = list(engine.stream(request))
    deltas = [event.delta.text for event in events if event.type == "delta"]
    assert len(deltas) > 1 and "".join(deltas) == whole.text
    assert (events[-1].usage.output_tokens, events[-1].finish_reason) == (whole.usage.output_tokens,
                                                                          whole.finish_reason)
