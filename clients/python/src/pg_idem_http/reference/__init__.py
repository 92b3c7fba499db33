"""The reference apps of CONTRACT.md "The reference apps" (run by the conformance suite)."""
