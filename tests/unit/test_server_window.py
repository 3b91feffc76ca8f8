"""A server whose slots hold less than the window asked (llama-server gives a slot at most the
model's trained window, whatever ``-c`` says) is refused with the reason and the mend."""

from skillgraft.server.records import window_mismatch


def test_a_slot_capped_at_the_trained_window_says_why_and_what_to_set():
    message = window_mismatch(32768, 65536)
    assert "hold 32768 tokens, the settings say 65536" in message
    assert "trained window" in message and "SKILLGRAFT_N_CTX to 32768 or less" in message


def test_another_mismatch_is_said_as_it_is():
    assert window_mismatch(8192, 4096) == "the server's slots hold 8192 tokens, the settings say 4096"
