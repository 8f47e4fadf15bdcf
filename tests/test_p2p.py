"""GPU peer-to-peer over PCIe as a property of the box: `with_peer_to_peer` and `tokensim.predict(..., p2p=)`.
Switching it changes only the PCIe links' medium, so the prediction moves by exactly the collectives' time at the two
media's shares. The `--p2p/--no-p2p` flags and a scenario's `p2p` key are tested in test_cli.py."""
import pytest

import tokensim
from tokensim.errors import TokensimError
from tokensim.perf.constants import for_hardware
from tokensim.specs.hardware.p2p import has_pcie_link, with_peer_to_peer, with_peer_to_peer_where_pcie


def test_switching_p2p_changes_the_pcie_links_medium_and_nothing_else():
    hw = tokensim.load_hardware("rtx-pro-6000")                   # the catalog box: no P2P (medium pcie-host)
    on = with_peer_to_peer(hw, True)
    assert hw.link("scale_up").medium == "pcie-host" and on.link("scale_up").medium == "pcie"
    assert with_peer_to_peer(on, False).links == hw.links
    assert with_peer_to_peer(hw, False) is hw                     # already off: the same spec
    same = ("bandwidth_bytes_per_s", "latency_s", "domain_chips", "source")
    assert all(getattr(on.link("scale_up"), f) == getattr(hw.link("scale_up"), f) for f in same)
    assert (on.name, on.memory, on.flops_per_s, on.family) == (hw.name, hw.memory, hw.flops_per_s, hw.family)
    assert on.display_name == f"{hw.display_name} (with GPU P2P)"
    assert with_peer_to_peer(on, False).display_name == f"{hw.display_name} (without GPU P2P)"   # not stacked


def test_a_chip_without_a_pcie_link_is_refused_naming_the_field_and_the_chip():
    h100 = tokensim.load_hardware("h100-sxm")
    assert not has_pcie_link(h100)
    with pytest.raises(TokensimError, match=r"^--no-p2p: hardware h100-sxm has no PCIe link"):
        with_peer_to_peer(h100, False, "--no-p2p")
    # a plan over an NVLink chip and a PCIe card switches the card only; over NVLink chips alone it is refused
    l40s = tokensim.load_hardware("l40s")
    mixed = with_peer_to_peer_where_pcie((h100, l40s), False)
    assert mixed[0] is h100 and mixed[1].link("scale_up").medium == "pcie-host"
    with pytest.raises(TokensimError, match="none of the hardware"):
        with_peer_to_peer_where_pcie((h100,), True)


def test_p2p_moves_a_decode_step_by_the_all_reduces_at_the_two_shares():
    """Qwen3-32B (64 layers, hidden 5,120) at TP 2 on RTX PRO 6000, batch 1: two all-reduces a layer, 128 in all,
    each moving 2 x (1 - 1/2) x 1 token x 5,120 x 2 B = 10,240 B per chip over PCIe 5.0 (64e9 B/s per direction).
    Everything else equal, time per output token differs by 128 x 10,240 x (1 / (0.25 x 64e9) - 1 / (0.66 x 64e9))
    = 51 us: the host-staged share 0.25 against the P2P share (pcie_link_bandwidth_fraction, 0.66)."""
    k = for_hardware(tokensim.load_hardware("rtx-pro-6000"), "vllm")
    assert (k.pcie_host_link_bandwidth_fraction, k.pcie_link_bandwidth_fraction) == (0.25, 0.66)
    off = tokensim.predict("qwen3-32b", "rtx-pro-6000", tp=2, engine="vllm", p2p=False)
    on = tokensim.predict("qwen3-32b", "rtx-pro-6000", tp=2, engine="vllm", p2p=True)
    default = tokensim.predict("qwen3-32b", "rtx-pro-6000", tp=2, engine="vllm")
    hand_s = 128 * 10_240 * (1 / (0.25 * 64e9) - 1 / (0.66 * 64e9))
    assert hand_s == pytest.approx(50.9e-6, rel=1e-3)
    assert off.time_per_output_token_s - on.time_per_output_token_s == pytest.approx(hand_s, rel=1e-9)
    assert default.time_per_output_token_s == off.time_per_output_token_s          # the file's box: no P2P
    assert on.ttft_s < off.ttft_s                                                  # a 1,024-token prefill moves more
    # each states its case and the other case's figures, which are the other prediction's own
    [said_on] = [a for a in on.assumptions if "peer-to-peer" in a]
    [said_off] = [a for a in off.assumptions if "peer-to-peer" in a]
    assert said_on.startswith("scale_up over PCIe with GPU peer-to-peer")
    assert said_off.startswith("scale_up over PCIe without GPU peer-to-peer")
    assert f"cost model {on.tokens_per_s_per_user:.3g} tokens/s per user, TTFT {on.ttft_s * 1e3:.3g} ms" in said_off
    assert f"cost model {off.tokens_per_s_per_user:.3g} tokens/s per user, TTFT {off.ttft_s * 1e3:.3g} ms" in said_on
    one_chip = tokensim.predict("qwen3-32b", "rtx-pro-6000", tp=1, engine="vllm", p2p=True)
    assert not any("peer-to-peer" in a for a in one_chip.assumptions)              # no link crossed, nothing said
