"""A toy fourth job kind, `echo`, written the way a new kind is added (docs/architecture.md, "Adding a job
kind"): one module per layer. The product keeps these in `<layer>/kinds/echo.py`, where the folder's registry
finds them; here they live beside the test that drives them and register when imported."""
