"""The signature of `loops.Refine`'s feedback role: advice for each predictor of a wrapped program whose
output was not accepted, given to it as a hint when the program runs again (as DSPy's `Refine` gives
its `OfferFeedback` advice, but as a role of the program, so an optimizer tunes it)."""

import dspy

__all__ = ["FeedbackSignature"]


class FeedbackSignature(dspy.Signature):
    """You are the FEEDBACK role. A program ran on the inputs below and its output was not accepted, for the
    reasons given. For each of the program's modules, give concrete advice for its next run on the same
    inputs: what it got wrong and what to do instead; "N/A" for a module that is not to blame.
    The modules do not see their earlier runs, so the advice must stand on its own.
    """

    program_inputs: str = dspy.InputField(desc="The inputs the program ran on")
    program_outputs: str = dspy.InputField(desc="What the program answered")
    judgment: str = dspy.InputField(desc="Why the answer was not accepted: the failed rules, the critic's words, "
                                         "the score and the score it must reach")
    module_names: list[str] = dspy.InputField(desc="The names of the program's modules, to advise each")

    advice: dict[str, str] = dspy.OutputField(desc="For each module name, the advice for its next run, or N/A")
