# tests/model/tests.cmake — the tiny-model tests generate their models through the ds4-gguf
# library, so test_model (made by tests/CMakeLists.txt from tests/model/*_test.cpp, linked
# to ds4_engine) also links ds4_gguf_tool_lib.
if(TARGET test_model AND TARGET ds4_gguf_tool_lib)
  target_link_libraries(test_model PRIVATE ds4_gguf_tool_lib)
endif()
# The canonical-hash test (SHA-256 of frontier logits) uses OpenSSL.
if(TARGET test_model)
  target_link_libraries(test_model PRIVATE OpenSSL::Crypto)
endif()
