"""factgate's web layer: the app factory (`web.app.create_app`) and the JSON API under /v1 with its
OpenAPI document; the HTML pages join them here. Views stay thin: every rule lives in checks/ and jobs/."""
