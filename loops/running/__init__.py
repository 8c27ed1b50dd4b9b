"""The run itself: the one loop runtime (`runtime`) and its pieces, one call of any kind with its retries (`calls`),
the replay layer every call goes through (`replay`), the drivers that perform a run's operations (`drivers`), how a
failed attempt is read (`failures`), the trace's `Step` (`steps`), each role's turns (`histories`), the one lookup
of a role (`roles`); a role answered by a person (`person`); what makes a loop a dspy.Module (`module`) and saves it
(`saving`).
"""

__all__: list[str] = []
