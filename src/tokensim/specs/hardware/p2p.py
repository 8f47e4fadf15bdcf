"""GPU peer-to-peer over PCIe is a property of the box, not of the chip: the same card reaches 0.66 of the PCIe line
rate in an all-reduce on a bare-metal server with P2P and 0.25 in a VM whose driver stages every transfer through host
memory (constants.toml, pcie_link_bandwidth_fraction and pcie_host_link_bandwidth_fraction). A hardware file states
what its catalog box has (medium "pcie" or "pcie-host"); `with_peer_to_peer` turns it on or off for one question
(`--p2p` / `--no-p2p`, a scenario's `p2p = true`) without copying the file."""
from __future__ import annotations

from dataclasses import replace

from tokensim.errors import TokensimError
from tokensim.specs.hardware.spec import HardwareSpec, Link

PCIE_MEDIA = {True: "pcie", False: "pcie-host"}        # peer-to-peer on -> the link's medium


def has_pcie_link(hw: HardwareSpec) -> bool:
    """True when some link of `hw` runs over PCIe (with or without peer-to-peer)."""
    return any(link.medium in PCIE_MEDIA.values() for link in hw.links)


def peer_to_peer_on(hw: HardwareSpec) -> bool:
    """Whether `hw`'s PCIe links carry GPU peer-to-peer (medium pcie); False for pcie-host or no PCIe link."""
    return any(link.medium == PCIE_MEDIA[True] for link in hw.links)


def flag_name(enabled: bool) -> str:
    """The command-line flag that asks for `enabled`."""
    return "--p2p" if enabled else "--no-p2p"


def with_peer_to_peer(hw: HardwareSpec, enabled: bool | None, field: str | None = None) -> HardwareSpec:
    """`hw` with GPU peer-to-peer on (`enabled`) or off on every PCIe link; bandwidth, latency and everything else as
    its file states them; `enabled` None: `hw` as it is. A chip without a PCIe link is refused, naming `field` (by
    default the flag that asked): its links (NVLink, xGMI, ...) do not depend on this setting."""
    if enabled is None:
        return hw
    field = field or flag_name(enabled)
    if not has_pcie_link(hw):
        stated = ", ".join(f"{link.name} {link.medium or 'medium unstated'}" for link in hw.links) or "none"
        raise TokensimError(f"{field}: hardware {hw.name} has no PCIe link (its links: {stated}); GPU peer-to-peer "
                            f"is a setting of PCIe boxes (medium pcie or pcie-host in the hardware file)")
    medium = PCIE_MEDIA[enabled]
    links = tuple(replace(link, medium=medium) if link.medium in PCIE_MEDIA.values() else link for link in hw.links)
    if links == hw.links:
        return hw
    base = hw.display_name.removesuffix(" (with GPU P2P)").removesuffix(" (without GPU P2P)")
    return replace(hw, links=links, display_name=f"{base} ({'with' if enabled else 'without'} GPU P2P)")


def with_peer_to_peer_where_pcie(specs: tuple[HardwareSpec, ...], enabled: bool | None,
                                 field: str | None = None) -> tuple[HardwareSpec, ...]:
    """Each chip of `specs` with GPU peer-to-peer switched on or off where it has a PCIe link, the others as they
    are (a plan over an NVLink chip and a PCIe card); `enabled` None: all as they are; refused, naming `field` (by
    default the flag), when none has a PCIe link."""
    if enabled is None:
        return specs
    field = field or flag_name(enabled)
    if not any(has_pcie_link(hw) for hw in specs):
        names = ", ".join(hw.name for hw in specs)
        raise TokensimError(f"{field}: none of the hardware ({names}) has a PCIe link; GPU peer-to-peer is a setting "
                            f"of PCIe boxes (medium pcie or pcie-host in the hardware file)")
    return tuple(with_peer_to_peer(hw, enabled, field) if has_pcie_link(hw) else hw for hw in specs)


def peer_to_peer_note(hw: HardwareSpec) -> str | None:
    """What a prediction on `hw` assumes about PCIe peer-to-peer (None: no PCIe link)."""
    link: Link | None = next((x for x in hw.links if x.medium in PCIE_MEDIA.values()), None)
    if link is None:
        return None
    on = peer_to_peer_on(hw)
    return (f"{link.name} over PCIe {'with' if on else 'without'} GPU peer-to-peer (medium {link.medium}); the "
            f"other case: {flag_name(not on)} (p2p={not on})")


__all__ = ["with_peer_to_peer", "with_peer_to_peer_where_pcie", "has_pcie_link", "peer_to_peer_on", "peer_to_peer_note",
           "flag_name", "PCIE_MEDIA"]
