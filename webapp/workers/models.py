"""GPU environments that results are measured on, and the Celery workers seen alive."""

from __future__ import annotations

from django.db import models


class GpuEnvironment(models.Model):
    """The hardware and software stack a timing was taken on; stored with every number."""

    name = models.CharField(max_length=128, help_text="e.g. NVIDIA H200")
    arch = models.CharField(max_length=16, help_text="e.g. sm_90")
    driver_version = models.CharField(max_length=32)
    cuda_version = models.CharField(max_length=32)
    cublas_version = models.CharField(max_length=32)
    cutlass_version = models.CharField(max_length=32)
    clocks = models.JSONField(default=dict, blank=True, help_text="SM / memory clocks in MHz.")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "arch"]
        constraints = [
            models.UniqueConstraint(
                fields=[
                    "name",
                    "arch",
                    "driver_version",
                    "cuda_version",
                    "cublas_version",
                    "cutlass_version",
                ],
                name="gpu_environment_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.arch}, CUDA {self.cuda_version})"


class WorkerHeartbeat(models.Model):
    """A Celery worker's last sign of life; written by webapp.workers.heartbeats."""

    hostname = models.CharField(max_length=255, unique=True, help_text="Celery node name.")
    queues = models.JSONField(default=list, blank=True, help_text="Queues it consumes.")
    gpu_environment = models.ForeignKey(
        GpuEnvironment, null=True, blank=True, on_delete=models.SET_NULL, related_name="workers"
    )
    started = models.DateTimeField()
    last_seen = models.DateTimeField()
    stopped = models.DateTimeField(null=True, blank=True, help_text="Set on a clean shutdown.")
    gpu_failed = models.DateTimeField(
        null=True, blank=True, help_text="When its GPU failed a health probe (its queue stopped)."
    )
    gpu_failure = models.TextField(blank=True, help_text="What the failed health probe said.")

    class Meta:
        ordering = ["hostname"]
        indexes = [models.Index(fields=["-last_seen"], name="heartbeat_last_seen_idx")]

    def __str__(self) -> str:
        return self.hostname

    @property
    def serves_gpu(self) -> bool:
        """True when it consumes a GPU queue (gpu.sm90, gpu.sm80, ...)."""
        return self.gpu_failed is None and any(str(q).startswith("gpu.") for q in self.queues)
