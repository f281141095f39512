{
  "targets": [
    {
      "target_name": "rdma_native",
      "sources": [
        "src/addon.cc",
        "src/runtime.cc",
        "src/buffers.cc",
        "src/work_requests.cc",
        "src/verbs_objects.cc",
        "src/cm_objects.cc",
        "src/testing.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions"],
      "cflags_cc": ["-std=c++17", "-Wall", "-Wextra", "-Wno-unused-parameter", "-fvisibility=hidden"],
      "libraries": ["-libverbs", "-lrdmacm"]
    }
  ]
}
