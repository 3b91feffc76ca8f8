"""What the HTTP doors share: the strict HTTP/1.1 protocol (:mod:`.http_guard`) and the uvicorn runner (:mod:`.serving`)."""
