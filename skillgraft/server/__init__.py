"""llama-server: building it, its process, slots and slot files, completions, and the
engine that grafts blocks through it."""
