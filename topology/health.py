"""Host health: what NVIDIA's XIDs mean, and each cluster's policy mapping health events to actions.

A policy is a small mapping stored on the cluster (`Cluster.health_policy`,
editable in the admin or under `health:` in the cluster file):

    {"xid": {"48": "drain", "79": "drain", "94": "drain", "95": "drain"},
     "heartbeat_lost": "down",
     "gpus_missing": "drain",
     "nvml_error": "drain",
     "ecc_uncorrected": "drain",
     "rows_pending": "drain"}

`nvml_error`: an NVML call the agent makes fails (on a GPU or as a whole), which
is never taken for health; `ecc_uncorrected`: a GPU's volatile uncorrected
(double-bit) ECC count rises; `rows_pending`: a GPU has retired pages or
remapped rows pending, which take effect only after a GPU reset.

Actions: `drain` (no new jobs; jobs leave at their minimum runtime; then
drained, ready for repair), `cordon` (no new jobs; running ones stay),
`down` (jobs are lost at once: resumable ones requeue), `none` (record only).
An automated action only ever takes a host further out of service, never
back: resuming is a person's decision.
"""

from dataclasses import dataclass

# What the common XIDs mean: NVIDIA's names from its Xid catalog
# (https://docs.nvidia.com/deploy/xid-errors/), with a word on what to do.
XID_MEANINGS: dict[int, tuple[str, str]] = {
    8: ("GPU stopped processing", "restart the application"),
    13: ("Graphics engine exception", "usually an application fault (illegal memory access); repeated: check the GPU"),
    31: ("GPU memory page fault", "usually an application fault (illegal address); repeated: check the GPU"),
    32: ("Invalid or corrupted push buffer stream", "PCIe quality problem: check the link"),
    38: ("Driver firmware error", "reboot; repeated: report a GPU issue"),
    43: ("GPU stopped processing", "an application hit a software fault; restart it"),
    44: ("Graphics engine fault during context switch", "reset the GPU or reboot the host"),
    45: ("Preemptive cleanup, due to previous errors", "informational: channels torn down after another failure"),
    46: ("GPU stopped processing", "reboot the host"),
    48: ("Double bit ECC error", "uncorrectable memory error: drain, then reset the GPU"),
    61: ("Internal micro-controller breakpoint/warning", "drain, then reset the GPU"),
    62: ("Internal micro-controller halt", "drain, then reset the GPU"),
    63: ("ECC page retirement or row remapping recording event", "reset the GPU when convenient"),
    64: ("ECC page retirement or row remapper recording failure", "reboot; repeated: drain and report a GPU issue"),
    68: ("NVDEC0 exception", "video decoder error: reset the GPU"),
    69: ("Graphics engine class error", "reboot; repeated: inspect the GPU"),
    74: ("NVLink error", "reset the GPU or reboot; repeated: check the links and the GPU at the other end"),
    79: ("GPU has fallen off the bus", "the GPU is unreachable over PCIe: drain and repair"),
    92: ("High single-bit ECC error rate", "corrected errors: run field diagnostics"),
    94: ("Contained ECC error", "the application must restart; reset the GPU when convenient"),
    95: ("Uncontained ECC error", "affects every application on the GPU: reset the GPU"),
    109: ("Context switch timeout error", "usually recoverable"),
    110: ("Security fault error", "drain and reset the GPU"),
    119: ("GSP RPC timeout", "reset the GPU; repeated: power-cycle the host"),
    120: ("GSP error", "reset the GPU; repeated: power-cycle the host"),
    121: ("C2C link error", "corrected errors on the NVLink-C2C link to the Grace CPU: reset the GPU to retrain"),
    136: ("Link training failed", "check the link"),
    140: ("Unrecovered ECC error", "drain and reset the GPU"),
    143: ("GPU initialization failure", "drain and repair"),
    154: ("GPU recovery action changed", "the driver asks for a GPU reset or a reboot"),
}

ACTIONS = ("drain", "cordon", "down", "none")
HEARTBEAT_ACTIONS = ("down", "drain", "cordon")
DEFAULT_HEALTH_POLICY = {
    "xid": {"48": "drain", "79": "drain", "94": "drain", "95": "drain"},
    "heartbeat_lost": "down",
    "gpus_missing": "drain",
    "nvml_error": "drain",
    "ecc_uncorrected": "drain",
    "rows_pending": "drain",
}
# Health events with one action each (the XIDs have a map of their own).
EVENT_KEYS = ("gpus_missing", "nvml_error", "ecc_uncorrected", "rows_pending")
HEALTH_ACTOR = "system:health"


def default_health_policy() -> dict:
    """A fresh copy of the defaults (a JSONField default must be a callable)."""
    return {
        "xid": dict(DEFAULT_HEALTH_POLICY["xid"]),
        "heartbeat_lost": DEFAULT_HEALTH_POLICY["heartbeat_lost"],
        **{key: DEFAULT_HEALTH_POLICY[key] for key in EVENT_KEYS},
    }


def xid_meaning(code: int | None) -> str:
    """NVIDIA's name for an XID, or '' when it is not one of the common ones."""
    if code is None:
        return ""
    return XID_MEANINGS.get(int(code), ("", ""))[0]


def xid_advice(code: int | None) -> str:
    if code is None:
        return ""
    return XID_MEANINGS.get(int(code), ("", ""))[1]


def parse_health_policy(data, where: str = "health") -> tuple[dict, list[str]]:
    """Check a policy (from the cluster file or the admin); return it complete, and every problem found.

    Keys left out keep their defaults; `xid` given replaces the default XID map
    whole, so a cluster can also stop draining on an XID.
    """
    problems: list[str] = []
    policy = default_health_policy()
    if data is None:
        return policy, problems
    if not isinstance(data, dict):
        return policy, [f"{where}: must be a mapping with xid, heartbeat_lost, {', '.join(EVENT_KEYS)}"]
    for key in sorted(set(data) - {"xid", "heartbeat_lost", *EVENT_KEYS}):
        problems.append(f"{where}.{key}: unknown key (known: xid, heartbeat_lost, {', '.join(EVENT_KEYS)})")
    if "xid" in data:
        xids = data["xid"]
        if not isinstance(xids, dict):
            problems.append(f"{where}.xid: must map XID codes to actions, e.g. {{79: drain}}")
        else:
            policy["xid"] = {}
            for code, action in xids.items():
                try:
                    number = int(str(code))
                except ValueError:
                    number = -1
                if isinstance(code, bool) or number < 0:
                    problems.append(f"{where}.xid.{code}: not an XID code (a whole number)")
                elif action not in ACTIONS:
                    problems.append(f"{where}.xid.{code}: {action!r} must be one of {', '.join(ACTIONS)}")
                else:
                    policy["xid"][str(number)] = action
    for key, allowed in (("heartbeat_lost", HEARTBEAT_ACTIONS), *((key, ACTIONS) for key in EVENT_KEYS)):
        if key in data:
            if data[key] not in allowed:
                problems.append(f"{where}.{key}: {data[key]!r} must be one of {', '.join(allowed)}")
            else:
                policy[key] = data[key]
    return policy, problems


@dataclass(frozen=True)
class HealthPolicy:
    """A cluster's policy, read safely: whatever is stored, a missing or unknown entry means the default."""

    xid: dict[str, str]
    heartbeat_lost: str
    gpus_missing: str
    nvml_error: str = DEFAULT_HEALTH_POLICY["nvml_error"]
    ecc_uncorrected: str = DEFAULT_HEALTH_POLICY["ecc_uncorrected"]
    rows_pending: str = DEFAULT_HEALTH_POLICY["rows_pending"]

    @classmethod
    def of(cls, stored) -> "HealthPolicy":
        policy, _ = parse_health_policy(stored)
        return cls(xid=policy["xid"], heartbeat_lost=policy["heartbeat_lost"],
                   **{key: policy[key] for key in EVENT_KEYS})

    def for_xid(self, code: int) -> str:
        return self.xid.get(str(code), "none")

    def describe(self) -> list[tuple[str, str]]:
        """(event, action) rows for pages."""
        rows = [
            (f"XID {code}" + (f" ({xid_meaning(int(code))})" if xid_meaning(int(code)) else ""), action)
            for code, action in sorted(self.xid.items(), key=lambda item: int(item[0]))
        ]
        rows.append(("lost heartbeat", self.heartbeat_lost))
        rows.append(("fewer GPUs visible than expected", self.gpus_missing))
        rows.append(("an NVML error", self.nvml_error))
        rows.append(("uncorrected ECC errors", self.ecc_uncorrected))
        rows.append(("retired pages or remapped rows pending", self.rows_pending))
        return rows
