import loops


def test_the_public_api_is_exactly_what_all_lists():
    assert set(loops.__all__) == {
        "Budget", "CallableValidator", "CommandNotFoundError", "ConfigurationError", "CreatorCriticIterator",
        "DecisionError", "DirectorExecutorEvaluatorController", "ExecuteValidateController", "LimitReached",
        "LoopModule", "LoopsError", "MissingDependencyError", "Observer", "PytestValidator", "RetryPolicy",
        "RoleFailed", "Run", "RunError", "ShellValidator", "Step", "Workspace", "observing", "tests_controller",
    }
    assert all(hasattr(loops, name) for name in loops.__all__)


def test_errors_form_one_hierarchy_split_into_misuse_and_run_failures():
    assert issubclass(loops.ConfigurationError, ValueError) and issubclass(loops.RunError, RuntimeError)
    assert issubclass(loops.MissingDependencyError, ImportError)
    assert issubclass(loops.CommandNotFoundError, FileNotFoundError)
    for error in (loops.ConfigurationError, loops.RunError, loops.LimitReached, loops.RoleFailed, loops.DecisionError):
        assert issubclass(error, loops.LoopsError)
