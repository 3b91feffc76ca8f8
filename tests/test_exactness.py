from skillgraft.verify.exactness import verify


def test_verify_smollm2_is_exact_and_its_control_is_not(smollm2):
    # Two samples, as for Gemma 3: the README's steps (tests/test_readme.py) verify SmolLM2 on five
    # through the CLI and three through llama-server.
    report = verify("smollm2-135m", 2, engine=smollm2)
    assert (report["samples"], report["sha_equal"], report["argmax_mismatch"], report["kl_median"]) == (2, 2, 0, 0.0)
    assert report["derived"]["sha_equal"] == report["derived"]["samples"] == 2  # a derived prefix state is exact
    control = report["negative_control"]
    assert control["samples"] == 2 and control["sha_equal"] == 0 and control["kl_median"] > 0
    assert report["bytes_per_token"] == smollm2.state_bytes_per_token
    assert 0 <= report["bytes_per_token"] - report["kv_bytes_per_token"] <= 16
    assert report["fingerprint"]["id"] == smollm2.fingerprint.id


def test_verify_gemma3_is_exact_with_full_swa_and_the_reduced_cache_is_not(gemma3):
    report = verify("gemma3-270m", 2, engine=gemma3, control_samples=2)
    assert report["sha_equal"] == 2 and report["argmax_mismatch"] == 0 and report["kl_median"] == 0.0
    assert report["derived"]["sha_equal"] == report["derived"]["samples"] == 2
    assert report["fingerprint"]["swa_full"] is True
    control = report["negative_control"]
    assert "swa_full off" in control["kind"]
    assert control["sha_equal"] < control["samples"] and control["kl_p99"] > 0
