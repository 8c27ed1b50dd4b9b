"""`loops.observers.tracing`: a run as OpenTelemetry GenAI spans, read back from the SDK's in-memory exporter. The span
tree and its attributes for each pattern and the DSL; a retry, a limit, a pause and its resume, a replayed
call, a validator's command; the role's span current while its predictor runs (sync, `aforward`, the worker
thread of a deadline), so that DSPy's own instrumentations nest under it; a batch on asyncio and on Ray, one
trace per example. The end-to-end test against a real trace backend: `test_tracing_mlflow.py`."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import dspy
import pytest
from dspy.lm15 import RateLimitError
from dspy.utils.callback import BaseCallback

pytest.importorskip("opentelemetry.sdk", reason="the tracing extra is installed by the README's test command")

from opentelemetry import context as otel_context  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

import loops  # noqa: E402
import loops.batch  # noqa: E402
import loops.observers.tracing  # noqa: E402
from loops import CreatorCriticIterator, DirectorExecutorEvaluatorController, ExecuteValidateController, RetryPolicy
from loops.sexp import compile as compile_program  # noqa: E402
from loops.vocabulary import context
from tests.loops.sample_runs import director_run, verdict  # noqa: E402

# The loopback LM server and the local Ray instance of the batch's tests, as fixtures here too.
from tests.loops.test_batch import EVERY_ROLE, ONE_TRY, examples, lm_server, local_ray, server  # noqa: E402, F401
from tests.loops.test_long_loops import never_approving  # noqa: E402
from tests.scripted import Phase, scripted_lm  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
REFINE = [{"reasoning": "r", "draft": "D0"}, verdict(2), {"improved_draft": "D1"}, verdict(3)]


@pytest.fixture
def spans(monkeypatch):
    """Tracing on, into a provider of this test's own whose spans are kept in memory (`Spans`)."""
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    provider, memory = TracerProvider(), InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    loops.observers.tracing.enable(provider=provider)
    yield Spans(memory)
    loops.observers.tracing.disable()


class Spans:
    """The finished spans, and the tree they make."""

    def __init__(self, memory: InMemorySpanExporter):
        self.memory = memory

    @property
    def all(self):
        return sorted(self.memory.get_finished_spans(), key=lambda span: span.start_time)

    def named(self, name):
        return [span for span in self.all if span.name == name]

    def children(self, span):
        return [child for child in self.all if child.parent is not None
                and child.parent.span_id == span.context.span_id]

    def roots(self):
        known = {span.context.span_id for span in self.all}
        return [span for span in self.all if span.parent is None or span.parent.span_id not in known]

    def tree(self, span=None):
        """Each root (or `span`) as (name, [its children's trees])."""
        if span is None:
            return [self.tree(root) for root in self.roots()]
        return span.name, [self.tree(child) for child in self.children(span)]


def events(span, name=None):
    return [(event.name, dict(event.attributes)) for event in span.events if name in (None, event.name)]


def test_a_refine_run_is_one_trace_a_workflow_over_its_role_calls_each_over_its_lm_requests(spans):
    with dspy.context(lm=scripted_lm(REFINE)):
        result = CreatorCriticIterator(max_iterations=3)(requirements="A haiku")

    assert spans.tree() == [("invoke_workflow CreatorCriticIterator", [
        ("invoke_agent creator", [("chat scripted/test", [])]), ("invoke_agent critic", [("chat scripted/test", [])]),
        ("invoke_agent iterator", [("chat scripted/test", [])]), ("invoke_agent critic", [("chat scripted/test", [])]),
    ])]
    [run] = spans.named("invoke_workflow CreatorCriticIterator")
    assert {name: run.attributes.get(name) for name in (
        "gen_ai.operation.name", "gen_ai.agent.name", "loops.stop_reason", "loops.success", "loops.iterations",
        "loops.lm_calls", "loops.tokens", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
        "loops.budget.max_iterations", "gen_ai.conversation.id")} == {
        "gen_ai.operation.name": "invoke_workflow", "gen_ai.agent.name": "CreatorCriticIterator",
        "loops.stop_reason": "approved", "loops.success": True, "loops.iterations": result.iterations,
        "loops.lm_calls": 4, "loops.tokens": 60, "gen_ai.usage.input_tokens": 40, "gen_ai.usage.output_tokens": 20,
        "loops.budget.max_iterations": 3, "gen_ai.conversation.id": None}
    assert run.status.status_code == trace.StatusCode.UNSET
    critics = spans.named("invoke_agent critic")
    assert [(span.attributes["loops.outcome"], span.attributes["loops.iteration"]) for span in critics] == [
        ("needs revision (2/3 criteria)", 1), ("approved (3/3 criteria)", 2)]
    creator = spans.named("invoke_agent creator")[0].attributes
    assert {name: creator[name] for name in ("gen_ai.operation.name", "gen_ai.agent.name", "gen_ai.request.model",
                                             "gen_ai.system", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
                                             "loops.call.kind", "loops.attempts", "loops.lm_calls")} == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "creator",
        "gen_ai.request.model": "scripted/test", "gen_ai.system": "scripted", "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 5, "loops.call.kind": "llm", "loops.attempts": 1, "loops.lm_calls": 1}
    chat = spans.named("chat scripted/test")[0]
    assert chat.kind == trace.SpanKind.CLIENT
    assert {name: chat.attributes[name] for name in ("gen_ai.operation.name", "gen_ai.request.model",
                                                     "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")} == {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "scripted/test", "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 5}


def test_a_director_run_traces_each_phase_as_a_role_call_with_its_outcome(spans):
    result = director_run()

    [run] = spans.roots()
    assert run.attributes["loops.stop_reason"] == result.stop_reason == "stopped"
    calls = [(span.attributes["loops.role"], span.attributes["loops.iteration"], span.attributes["loops.call.kind"])
             for span in spans.children(run)]
    assert calls == [(step.role, step.iteration, "phase") for step in result.trace]
    outcomes = [span.attributes["loops.outcome"] for span in spans.children(run)
                if span.attributes["loops.role"] == "evaluator"]
    assert outcomes == ["FAIL", "PASS"]


def test_a_validators_command_is_an_execute_tool_span_under_the_validator_call(spans, tmp_path):
    command = f"{sys.executable} -c \"import sys; print('1 failed'); sys.exit(1)\""
    module = ExecuteValidateController(executor=Phase({"solution.py": "x = 1"}), controller=Phase(("stop", "enough")),
                                       workspace=tmp_path)
    result = module(initial_input="task", test_command=command, max_iterations=1)

    [run] = spans.roots()
    assert run.name == "invoke_workflow ExecuteValidateController"
    assert [(span.name, span.attributes["loops.call.kind"]) for span in spans.children(run)] == [
        (f"invoke_agent {step.role}", "phase") for step in result.trace]
    [validator] = spans.named("invoke_agent validator")
    [tool] = spans.children(validator)
    assert tool.name == "execute_tool python3" or tool.name == f"execute_tool {Path(sys.executable).name}"
    assert {name: tool.attributes[name] for name in ("gen_ai.operation.name", "loops.command", "loops.command.cwd",
                                                     "loops.command.exit_code", "loops.command.timed_out")} == {
        "gen_ai.operation.name": "execute_tool", "loops.command": command, "loops.command.cwd": str(tmp_path),
        "loops.command.exit_code": 1, "loops.command.timed_out": False}
    assert tool.attributes["loops.command.seconds"] > 0


def test_a_command_killed_at_its_timeout_is_a_failed_span_naming_the_timeout(spans, tmp_path):
    loops.ShellValidator(workspace=tmp_path, timeout_s=0.3).run(f"{sys.executable} -c \"import time; time.sleep(5)\"")

    [tool] = spans.all
    assert (tool.attributes["loops.command.timed_out"], tool.attributes["loops.command.exit_code"]) == (True, -9)
    assert tool.attributes["error.type"] == "timeout" and tool.status.status_code == trace.StatusCode.ERROR


SLOGAN_LOOP = """
(defatom user:slogan (params (product string)) (instructions "A slogan for {{product}}.") (returns (slogan string)))
(define first (get-field (user:slogan (product "tea")) "slogan"))
(creator-critic-loop
  (max-iterations 2) (requirements first)
  (creator (lambda (requirements context n) requirements))
  (critic (lambda (requirements draft n) (list (> n 1) "again")))
  (iterator (lambda (requirements draft feedback n) (string-append draft "!"))))
"""


def test_a_dsl_program_traces_its_atoms_and_each_loop_form_as_a_run_within_its_program(spans):
    lm = scripted_lm([{"slogan": "Tea, simply"}])
    with dspy.context(lm=lm):
        result = compile_program(SLOGAN_LOOP)()

    assert result.final == "Tea, simply!"
    assert spans.tree() == [("invoke_workflow SexpProgram", [("invoke_agent program", [
        ("invoke_agent user:slogan", [("chat scripted/test", [])]),
        ("invoke_workflow CreatorCriticIterator", [
            ("invoke_agent creator", []), ("invoke_agent critic", []), ("invoke_agent iterator", []),
            ("invoke_agent critic", [])]),
    ])])]
    [form] = spans.named("invoke_workflow CreatorCriticIterator")
    assert (form.attributes["loops.run.nested"], form.attributes["loops.stop_reason"]) == (True, "approved")
    assert spans.named("invoke_agent user:slogan")[0].attributes["loops.call.kind"] == "llm"


def test_a_retry_and_a_reask_are_events_of_the_role_call_that_made_them(spans):
    lm = scripted_lm([{"reasoning": "r", "draft": "D0"}, RateLimitError("slow down"), "garbage", '{"oops": 1}',
                      verdict(3)])
    with dspy.context(lm=lm):
        result = CreatorCriticIterator(retry=RetryPolicy(attempts=3, backoff_s=0))(requirements="r")

    assert result.stop_reason == "approved"
    [critic] = spans.named("invoke_agent critic")
    failed = events(critic, "loops.attempt_failed")
    assert [(attributes["attempt"], attributes["error.type"], attributes["action"]) for _, attributes in failed] == [
        (1, "LMRateLimitError", "retry"), (2, "AdapterParseError", "reparse")]
    assert critic.attributes["loops.attempts"] == 3
    assert critic.status.status_code == trace.StatusCode.UNSET


def test_a_role_that_fails_for_good_and_the_run_it_ended_are_failed_spans(spans):
    lm = scripted_lm([{"reasoning": "r", "draft": "D0"}, RateLimitError("slow down")])
    with dspy.context(lm=lm):
        result = CreatorCriticIterator(retry=ONE_TRY)(requirements="r")

    assert result.stop_reason == "error"
    [critic] = spans.named("invoke_agent critic")
    assert critic.status.status_code == trace.StatusCode.ERROR
    assert critic.attributes["error.type"] == "LMRateLimitError" and "slow down" in critic.status.description
    [run] = spans.roots()
    assert run.status.status_code == trace.StatusCode.ERROR and run.attributes["loops.stop_reason"] == "error"


def test_a_limit_that_stops_the_run_is_an_event_of_its_span(spans):
    with dspy.context(lm=scripted_lm(never_approving)):
        result = CreatorCriticIterator(max_iterations=5)(requirements="r", max_lm_calls=3)

    [run] = spans.roots()
    assert result.stop_reason == run.attributes["loops.stop_reason"] == "lm_calls"
    assert [(attributes["reason"], "max_lm_calls=3" in attributes["message"])
            for _, attributes in events(run, "loops.limit_reached")] == [("lm_calls", True)]
    assert run.status.status_code == trace.StatusCode.UNSET  # a limit is an expected end, not a failure
    assert len(spans.named("invoke_agent iterator")) == 1


def test_a_pause_for_a_person_and_the_resume_are_events_with_the_checkpoint_and_run_id(spans, tmp_path):
    path, lm = tmp_path / "runs.db", scripted_lm(never_approving)
    loop = CreatorCriticIterator(max_iterations=3, critic=loops.human(interactive=False))
    with dspy.context(lm=lm):
        paused = loop(requirements="a slogan", checkpoint=path, run_id="r1")
    [first] = spans.roots()
    assert paused.stop_reason == first.attributes["loops.stop_reason"] == "awaiting_input"
    [(_, pause)] = events(first, "loops.paused")
    assert (pause["role"], pause["loops.run.id"], pause["loops.run.checkpoint"]) == ("critic", "r1", str(path))
    assert "CRITIC" in pause["question"]
    assert first.attributes["gen_ai.conversation.id"] == "r1"

    loops.answer(path, "r1", approved="false", feedback="Name the bottle")
    spans.memory.clear()
    with dspy.context(lm=lm):
        loop(requirements="a slogan", checkpoint=path, run_id="r1")
    [second] = spans.roots()
    assert second.attributes["loops.run.recorded_calls"] == 1
    assert [(name, attributes.get("role")) for name, attributes in events(second)] == [
        ("loops.call_replayed", "creator"), ("loops.resumed", "critic"), ("loops.paused", "critic")]
    assert [span.name for span in spans.children(second)] == ["invoke_agent critic", "invoke_agent iterator",
                                                              "invoke_agent critic"]
    person = spans.children(second)[0]
    assert (person.attributes["loops.call.kind"], person.attributes["gen_ai.conversation.id"]) == ("human", "r1")


class ForeignInstrumentation(BaseCallback):
    """What DSPy's instrumentations (MLflow's autolog, OpenInference) do: a span around every module call, made
    by their own tracer, whose parent is whatever span is current."""

    def __init__(self):
        self.tracer = TracerProvider().get_tracer("foreign")
        self.parents, self._open = [], {}

    def on_module_start(self, call_id, instance, inputs):
        self.parents.append(trace.get_current_span().get_span_context().span_id)
        span = self.tracer.start_span(type(instance).__name__)
        self._open[call_id] = span, otel_context.attach(trace.set_span_in_context(span))

    def on_module_end(self, call_id, outputs, exception=None):
        span, token = self._open.pop(call_id)
        otel_context.detach(token)
        span.end()


@pytest.mark.parametrize("way", ["forward", "aforward", "forward with a deadline"])
def test_dspys_own_instrumentations_nest_under_the_role_call_that_runs_the_predictor(spans, way):
    foreign = ForeignInstrumentation()
    module = CreatorCriticIterator(max_iterations=3)
    with dspy.context(lm=scripted_lm(REFINE), callbacks=[foreign]):
        if way == "aforward":
            import asyncio

            asyncio.run(module.acall(requirements="A haiku"))
        else:
            module(requirements="A haiku", timeout_s=60 if "deadline" in way else None)

    roles = [span.context.span_id for span in spans.all if span.name.startswith("invoke_agent")]
    # The outermost module call of each role (its predictor) starts while the role's span is current.
    assert [parent for parent in foreign.parents if parent in roles] == roles


def test_a_phase_runs_with_its_role_calls_span_current_in_its_thread_sync_and_async(spans):
    seen = []

    def director(current_input, iteration):
        seen.append(trace.get_current_span().get_span_context().span_id)
        return "plan"

    module = DirectorExecutorEvaluatorController(director=director, executor=Phase("done"),
                                                 evaluator=Phase({"status": "PASS", "feedback": ""}),
                                                 controller=Phase(("stop", "ok")))
    module(initial_input="goal", max_iterations=1)
    import asyncio

    asyncio.run(module.acall(initial_input="goal", max_iterations=1))  # a plain phase runs in a worker thread there

    assert seen == [span.context.span_id for span in spans.named("invoke_agent director")]


def test_the_latest_conventions_are_emitted_when_otel_semconv_stability_opt_in_asks_for_them(spans, monkeypatch):
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "http, gen_ai_latest_experimental")
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    loops.observers.tracing.enable(provider=provider)
    with dspy.context(lm=scripted_lm([{"reasoning": "r", "draft": "D0"}, verdict(3)])):
        CreatorCriticIterator()(requirements="r")

    latest = Spans(memory)
    [run] = latest.roots()
    assert run.attributes["gen_ai.workflow.name"] == "CreatorCriticIterator"
    assert "gen_ai.agent.name" not in run.attributes
    creator = latest.named("invoke_agent creator")[0].attributes
    assert creator["gen_ai.provider.name"] == "scripted" and "gen_ai.system" not in creator
    assert spans.all == []  # the earlier enable's observer was replaced, not added to


def test_every_gen_ai_name_is_one_of_the_semantic_conventions():
    semconv = pytest.importorskip("opentelemetry.semconv._incubating.attributes.gen_ai_attributes")
    known = {value for name, value in vars(semconv).items() if name.startswith("GEN_AI_") and isinstance(value, str)}
    ours = {name for name, _, _ in loops.observers.tracing.ATTRIBUTES if name.startswith("gen_ai.")}
    assert ours <= known, ours - known
    operations = {operation for _, _, operation in loops.observers.tracing.SPANS.values() if operation}
    assert operations <= {value.value for value in semconv.GenAiOperationNameValues}


def test_tracing_off_is_no_observer_and_the_library_runs_without_opentelemetry(tmp_path):
    assert context.observers() == ()
    script = textwrap.dedent("""
        import sys
        sys.modules["opentelemetry"] = None  # as if the tracing extra were not installed
        import dspy, loops, loops.batch, loops.observers.tracing
        from loops.errors import MissingDependencyError
        from tests.scripted import scripted_lm
        from tests.loops.sample_runs import verdict
        with dspy.context(lm=scripted_lm([{"reasoning": "r", "draft": "D0"}, verdict(3)])):
            print(loops.CreatorCriticIterator()(requirements="r").stop_reason, loops.observers.tracing.carrier())
        try:
            loops.observers.tracing.enable()
        except MissingDependencyError as error:
            print(error)
    """)
    ran = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["approved {}", "loops.observers.tracing needs OpenTelemetry, which is not "
                                                      "installed. Fix: pip install 'loops[tracing]'"]


def test_a_batch_on_asyncio_gives_each_example_a_trace_linked_to_where_it_was_started(spans, tmp_path):
    tracer = TracerProvider().get_tracer("caller")
    lm = scripted_lm(lambda engine, request: EVERY_ROLE)
    with dspy.context(lm=lm), tracer.start_as_current_span("caller") as caller:
        loops.batch.run(CreatorCriticIterator(), examples(3), out=tmp_path / "out.jsonl", progress=False)

    roots = spans.roots()
    assert sorted(root.attributes["loops.batch.example.id"] for root in roots) == ["note-0", "note-1", "note-2"]
    assert len({root.context.trace_id for root in roots}) == 3  # one trace per example
    for root in roots:
        assert root.name == "loops.batch.example" and root.parent is None
        assert (root.attributes["loops.batch.backend"], root.attributes["loops.success"]) == ("asyncio", True)
        assert [link.context.span_id for link in root.links] == [caller.get_span_context().span_id]
        [run] = spans.children(root)
        assert run.name == "invoke_workflow CreatorCriticIterator"
        assert {span.context.trace_id for span in spans.all if span.context.trace_id == root.context.trace_id}
        assert [child.name for child in spans.children(run)] == ["invoke_agent creator", "invoke_agent critic"]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_batch_on_ray_traces_each_example_in_its_worker_and_the_spans_come_home(  # noqa: F811
        spans, lm_server, local_ray, tmp_path):  # noqa: F811
    with dspy.context(lm=lm_server.lm()):
        summary = loops.batch.run(CreatorCriticIterator(retry=ONE_TRY), examples(4), out=tmp_path / "out.jsonl",
                                  backend="ray", concurrency=4, progress=False)

    assert summary.finished == 4
    roots = spans.roots()
    assert sorted(root.attributes["loops.batch.example.id"] for root in roots) == [f"note-{n}" for n in range(4)]
    assert len({root.context.trace_id for root in roots}) == 4
    for root in roots:
        assert root.attributes["loops.batch.backend"] == "ray"
        [run] = spans.children(root)
        assert run.attributes["loops.stop_reason"] == "approved"
        agents = spans.children(run)
        assert [agent.name for agent in agents] == ["invoke_agent creator", "invoke_agent critic"]
        assert all(span.name.startswith("chat ") for agent in agents for span in spans.children(agent))


def test_docs_tracing_shows_every_span_and_attribute():
    page = (ROOT / "docs" / "tracing.md").read_text()
    rows = {row.split("|")[1].strip().strip("`") for row in page.splitlines() if row.startswith("| `")}
    assert {name for name, _, _ in loops.observers.tracing.ATTRIBUTES} <= rows
    assert all(f"`{name}`" in page for name, _, _ in loops.observers.tracing.SPANS.values())


def test_the_standard_variables_choose_the_otlp_endpoint_and_enabling_twice_exports_once(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    provider = TracerProvider()
    try:
        first = loops.observers.tracing.enable(provider=provider)
        [processor] = first.processors
        assert processor.span_exporter._endpoint == "http://127.0.0.1:9/v1/traces"
        assert loops.observers.tracing.enable(provider=provider).processors == []  # already exporting there
        assert loops.observers.tracing.enable(provider=provider, otlp=False).processors == []
        assert context.observers() == (loops.observers.tracing.enabled().observer,)
    finally:
        loops.observers.tracing.disable()
    assert loops.observers.tracing.enabled() is None and context.observers() == ()
