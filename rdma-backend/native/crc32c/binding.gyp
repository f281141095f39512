{
  "targets": [
    {
      "target_name": "crc32c",
      "sources": ["crc32c.c"],
      "defines": ["NAPI_VERSION=8"],
      "cflags": ["-O3", "-Wall", "-Wextra", "-fvisibility=hidden"]
    }
  ]
}
