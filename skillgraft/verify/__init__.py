"""Verification: the verifiers a deposit must pass, the sandbox that runs method code, and
the byte-exactness self-test behind ``skillgraft verify``."""

from .verifiers import CallableVerifier, ExactVerifier, NumericVerifier, PythonVerifier, Verdict, Verifier

__all__ = ["CallableVerifier", "ExactVerifier", "NumericVerifier", "PythonVerifier", "Verdict", "Verifier"]
