from django.contrib import admin

from webapp.workers.models import GpuEnvironment, WorkerHeartbeat


@admin.register(GpuEnvironment)
class GpuEnvironmentAdmin(admin.ModelAdmin):
    list_display = ["name", "arch", "driver_version", "cuda_version", "cublas_version", "created"]
    list_filter = ["arch", "cuda_version"]
    search_fields = ["name", "arch", "driver_version", "cuda_version"]


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(admin.ModelAdmin):
    list_display = ["hostname", "queues", "gpu_environment", "started", "last_seen", "stopped"]
    list_filter = ["gpu_environment"]
    search_fields = ["hostname"]
    raw_id_fields = ["gpu_environment"]
