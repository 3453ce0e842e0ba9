"""The agent's CUDA_VISIBLE_DEVICES: GPU indices, MIG UUIDs from NVML, or the server's stable MIG ids."""

import types

import pytest

from client.agent import cuda_visible_devices
from client.nvml import NvmlProbe

MIG = [{"gpu": 1, "profile": "3g.40gb", "start": 4, "id": "MIG-node-h01-1-4"}]


def test_whole_gpus_and_fractions_see_gpu_indices():
    assert cuda_visible_devices({"gpus": [0, 2, 3]}) == "0,2,3"
    assert cuda_visible_devices({"gpus": [1], "gpu_milli": 500, "mig": []}) == "1"


def test_without_nvml_a_mig_job_sees_the_stable_id():
    assert cuda_visible_devices({"gpus": [1], "mig": MIG}, NvmlProbe(nvml=None)) == "MIG-node-h01-1-4"


@pytest.fixture
def fake_nvml():
    """GPU 1 in MIG mode with a 1g instance at slice 6 and a 3g one at slice 4 (GPU instance ids 13 and 2)."""

    class NVMLError(Exception):
        pass

    placements = {13: 6, 2: 4}
    uuids = {13: "MIG-11111111-2222-3333-4444-555555555555", 2: "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"}
    devices = [13, None, 2]  # MIG device positions (one empty)
    nvml = types.SimpleNamespace(
        NVMLError=NVMLError,
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda index: ("gpu", index),
        nvmlDeviceGetMaxMigDeviceCount=lambda device: len(devices),
        nvmlDeviceGetGpuInstanceId=lambda mig: mig,
        nvmlDeviceGetGpuInstanceById=lambda device, gi: gi,
        nvmlGpuInstanceGetInfo=lambda gi: types.SimpleNamespace(placement=types.SimpleNamespace(start=placements[gi])),
        nvmlDeviceGetUUID=lambda mig: uuids[mig].encode(),
    )

    def mig_device(device, position):
        if devices[position] is None:
            raise NVMLError("not found")
        return devices[position]

    nvml.nvmlDeviceGetMigDeviceHandleByIndex = mig_device
    return NvmlProbe(nvml=nvml)


def test_with_nvml_a_mig_job_sees_the_instances_real_uuid(fake_nvml):
    assert cuda_visible_devices({"gpus": [1], "mig": MIG}, fake_nvml) == "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def test_an_instance_nvml_does_not_show_falls_back_to_the_stable_id(fake_nvml):
    missing = [{**MIG[0], "start": 0, "id": "MIG-node-h01-1-0"}]
    assert cuda_visible_devices({"gpus": [1], "mig": missing}, fake_nvml) == "MIG-node-h01-1-0"
