"""The settle wait between trials: its rule against a scripted fake NVML and a fake clock
(nothing really sleeps), the choice of GPU, and the pause on this GPU-less machine."""

from __future__ import annotations

import pytest

from perflab.experiment import settle as settle_mod
from perflab.experiment.settle import SETTLE_INTERVAL_S, SETTLE_WINDOW, nvml_target, settle

DT = SETTLE_INTERVAL_S


class FakeTime:
    """A monotonic clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 100.0  # not 0: waited_s must be measured from the start, not from 0
        self.slept = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds
        self.slept += seconds


class FakeNvml:
    """The pynvml calls settle makes. Each reading call returns the next scripted value
    (the last one repeats); an exception in a script is raised at that reading, and a
    script that is an exception is raised on every reading (an unsupported query)."""

    def __init__(self, power_w=(80.0,), clock_mhz=(1980,), temp_c=(60,), init_error=None):
        self.scripts = {"power": power_w, "clock": clock_mhz, "temp": temp_c}
        self.reads = {"power": 0, "clock": 0, "temp": 0}
        self.init_error = init_error
        self.inits = 0
        self.handles: list[object] = []

    def _next(self, name):
        script = self.scripts[name]
        if isinstance(script, Exception):
            raise script
        value = script[min(self.reads[name], len(script) - 1)]
        self.reads[name] += 1
        if isinstance(value, Exception):
            raise value
        return value

    def nvmlInit(self):
        self.inits += 1
        if self.init_error is not None:
            raise self.init_error

    def nvmlDeviceGetHandleByIndex(self, index):
        self.handles.append(index)
        return f"handle-{index}"

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.handles.append(uuid)
        return f"handle-{uuid}"

    def nvmlDeviceGetPowerUsage(self, handle):
        return int(self._next("power") * 1000)  # mW, as NVML reports it

    def nvmlDeviceGetClockInfo(self, handle, kind):
        assert kind == 1  # NVML_CLOCK_SM
        return self._next("clock")

    def nvmlDeviceGetTemperature(self, handle, kind):
        assert kind == 0  # NVML_TEMPERATURE_GPU
        return self._next("temp")


@pytest.fixture(autouse=True)
def _gpu0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")


def run(max_s: float, device: str = "cuda", nvml: object | None = None, **kw):
    t = FakeTime()
    return settle(max_s, device, nvml=nvml, clock=t.clock, sleep=t.sleep, **kw), t


def test_off_returns_at_once_without_touching_nvml():
    nvml = FakeNvml()
    for max_s in (0.0, -1.0):
        result, t = run(max_s, nvml=nvml)
        assert result == {"waited_s": 0.0, "how": "off"}
        assert t.slept == 0.0
    assert nvml.inits == 0


def test_cpu_pauses_the_whole_bound():
    nvml = FakeNvml()
    result, t = run(2.5, "cpu", nvml=nvml)
    assert t.slept == 2.5
    assert result["how"] == "pause" and result["waited_s"] == 2.5
    assert "cpu" in result["reason"]
    assert nvml.inits == 0 and nvml.reads["power"] == 0


def test_decaying_power_settles_after_the_flat_stretch():
    # A 700 W trial just ended: power decays, the SM clock recovers, the GPU cools; from
    # reading 7 on all three are flat. The last moving power reading (100 W) is 25 % above
    # the floor, so no window that contains it can pass the 5 % rule.
    power = (700, 500, 350, 250, 180, 130, 100, 80)
    sm_clock = (1400, 1500, 1600, 1700, 1800, 1900, 1950, 1980)
    temp = (84, 82, 80, 78, 76, 74, 72, 70)
    nvml = FakeNvml(power, sm_clock, temp)
    result, _ = run(5.0, "auto", nvml=nvml)
    flat_from = 7
    expected_s = (flat_from + SETTLE_WINDOW - 1) * DT  # the window's last reading
    assert result["how"] == "nvml" and result["settled"] is True
    assert abs(result["waited_s"] - expected_s) <= DT
    assert result["waited_s"] < 5.0
    assert nvml.reads["power"] == flat_from + SETTLE_WINDOW  # stopped polling once settled
    assert (result["power_w"], result["sm_clock_mhz"], result["temperature_c"]) == (80.0, 1980, 70)
    assert "reason" not in result


def test_a_gpu_still_cooling_is_not_settled():
    # power and clock are flat from the start; the temperature falls 1 degree per reading
    # down to 70, so the first window to pass is the one that starts at 71
    temp = tuple(range(90, 69, -1))
    result, _ = run(5.0, nvml=FakeNvml(temp_c=temp))
    assert result["settled"] is True
    starts_at_71 = len(temp) - 2
    expected_s = (starts_at_71 + SETTLE_WINDOW - 1) * DT
    assert abs(result["waited_s"] - expected_s) <= DT
    assert result["waited_s"] > (SETTLE_WINDOW - 1) * DT + DT  # not the earliest window


def test_readings_that_never_settle_stop_at_the_bound():
    power = (300, 600) * 100  # a GPU still busy with someone else's work
    clock_mhz = (1400, 1980) * 100
    result, t = run(1.0, nvml=FakeNvml(power, clock_mhz))
    assert result["how"] == "nvml" and result["settled"] is False
    assert t.slept == pytest.approx(1.0)
    assert result["waited_s"] == pytest.approx(1.0)
    assert "reason" not in result


def test_an_unsupported_temperature_is_left_out_of_the_rule():
    nvml = FakeNvml(temp_c=RuntimeError("NVML_ERROR_NOT_SUPPORTED"))
    result, _ = run(5.0, nvml=nvml)
    assert result["settled"] is True
    assert result["waited_s"] == pytest.approx((SETTLE_WINDOW - 1) * DT)
    assert result["temperature_c"] is None and result["power_w"] == 80.0


def test_an_nvml_error_mid_wait_ends_it_unsettled():
    power = (700, 500, 350, RuntimeError("NVML_ERROR_GPU_IS_LOST"), 80)
    result, _ = run(5.0, nvml=FakeNvml(power))
    assert result["how"] == "nvml" and result["settled"] is False
    assert "GPU_IS_LOST" in result["reason"]
    assert result["waited_s"] == pytest.approx(3 * DT)
    assert result["power_w"] == 350.0  # the last good reading


def test_nvml_that_cannot_start_turns_the_wait_into_a_pause():
    nvml = FakeNvml(init_error=RuntimeError("NVML_ERROR_DRIVER_NOT_LOADED"))
    result, t = run(0.5, nvml=nvml)
    assert result["how"] == "pause" and "DRIVER_NOT_LOADED" in result["reason"]
    assert t.slept == 0.5


def test_a_gpu_reporting_nothing_is_a_pause():
    err = RuntimeError("NVML_ERROR_NOT_SUPPORTED")
    result, t = run(0.5, nvml=FakeNvml(err, err, err))
    assert result["how"] == "pause" and "none of" in result["reason"]
    assert t.slept == pytest.approx(0.5)


def test_nvml_is_initialised_once_per_process():
    nvml = FakeNvml()
    run(1.0, nvml=nvml)
    run(1.0, nvml=nvml)
    assert nvml.inits == 1


def test_a_zero_interval_is_refused_rather_than_busy_waiting():
    with pytest.raises(ValueError, match="interval_s"):
        run(1.0, nvml=FakeNvml(), interval_s=0.0)


@pytest.mark.parametrize(
    ("visible", "expected"), [("2", 2), ("2,3", 2), ("GPU-abc", "GPU-abc"), ("", 0), (None, 0)]
)
def test_nvml_target_follows_cuda_visible_devices(monkeypatch, visible, expected):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert nvml_target() == expected


def test_settle_looks_the_gpu_up_by_uuid_or_index(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc")
    by_uuid = FakeNvml()
    run(1.0, nvml=by_uuid)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    by_index = FakeNvml()
    run(1.0, nvml=by_index)
    assert (by_uuid.handles, by_index.handles) == (["GPU-abc"], [3])


def test_without_an_nvml_library_auto_pauses():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - the expected case on this GPU-less machine
        pass
    else:
        pytest.skip("NVML works on this machine")
    result, t = run(0.01, "auto")  # real pynvml, fake clock
    assert result["how"] == "pause" and result["reason"].startswith("NVML:")
    assert t.slept == 0.01
    assert settle_mod._initialised is not pynvml  # a failed start is not remembered as done
