from django.conf import settings
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.workers import selectors


@require_GET
def workers(request):
    online = list(selectors.workers_online())
    online_names = {w.hostname for w in online}
    return render(
        request,
        "workers/list.html",
        {
            "online": online,
            "offline": [w for w in selectors.workers_all() if w.hostname not in online_names],
            "gpu_online": any(w.serves_gpu for w in online),
            "window_s": settings.WORKER_ONLINE_SECONDS,
        },
    )
