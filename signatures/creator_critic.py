"""Signatures of the Creator–Critic–Iterator roles.

Each role has its own class with distinct instructions: GEPA assigns traces to predictors by
signature equality, and each role's `history` holds that role's own past calls, keyed by these
field names (DSPy's adapters drop history entries keyed any other way). The critic's verdict is
`approved`, not `completed`: ChatAdapter ends every answer with a `[[ ## completed ## ]]` marker.
"""

import dspy

__all__ = ["CRITERIA", "CreatorSignature", "CriticSignature", "IteratorSignature"]


class CreatorSignature(dspy.Signature):
    """You are the CREATOR. Write the first draft of the content the requirements ask for.

    Follow the requirements exactly. Be complete but concise; aim for a draft that needs no revision.
    """

    requirements: str = dspy.InputField(desc="What to create")
    context: str = dspy.InputField(desc="Background context (may be empty)")
    history: dspy.History = dspy.InputField(desc="Your earlier calls in this run (empty on the first)")

    draft: str = dspy.OutputField(desc="The created content, and nothing else")


class CriticSignature(dspy.Signature):
    """You are the CRITIC. Judge the draft against the requirements on three criteria.

    1. Accuracy: no factual errors or fabrications.
    2. Completeness: every requirement is addressed.
    3. Quality: it meets professional standards.
    Set `approved` to true ONLY when all three criteria pass; otherwise give specific, actionable
    feedback that an editor can apply.
    """

    requirements: str = dspy.InputField(desc="The original requirements")
    draft: str = dspy.InputField(desc="The draft to judge")
    history: dspy.History = dspy.InputField(desc="Your earlier judgements of earlier drafts in this run")

    accuracy_passed: bool = dspy.OutputField(desc="True if the draft has no factual errors")
    completeness_passed: bool = dspy.OutputField(desc="True if every requirement is met")
    quality_passed: bool = dspy.OutputField(desc="True if the draft is of professional quality")
    feedback: str = dspy.OutputField(desc="Specific, actionable changes to make (empty if none)")
    approved: bool = dspy.OutputField(desc="True ONLY if all three criteria pass")


class IteratorSignature(dspy.Signature):
    """You are the ITERATOR. Revise the draft so that it answers the critic's feedback.

    Address every point of the feedback, above all the criteria it says failed; keep what is
    already good and make the smallest changes that fix the problems.
    """

    requirements: str = dspy.InputField(desc="The original requirements")
    draft: str = dspy.InputField(desc="The draft to revise")
    feedback: str = dspy.InputField(desc="The critic's feedback on the draft, starting with the criteria that failed")
    history: dspy.History = dspy.InputField(desc="Your earlier revisions in this run")

    improved_draft: str = dspy.OutputField(desc="The revised content, and nothing else")


# The critic's criteria, read off its signature (`<name>_passed` outputs): the one place they are declared.
CRITERIA = tuple(name.removesuffix("_passed") for name in CriticSignature.output_fields if name.endswith("_passed"))
