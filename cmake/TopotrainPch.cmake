# One precompiled LibTorch header for the whole build: a LibTorch translation unit spends
# most of its compile time in torch's headers, so every torch-using target reuses this one.
#
#   topotrain_use_torch(target)   links LibTorch and reuses the shared precompiled header

add_library(topotrain_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch.cpp)
target_link_libraries(topotrain_pch PUBLIC topotrain_torch)
target_precompile_headers(topotrain_pch PRIVATE ${PROJECT_SOURCE_DIR}/cmake/torch_pch.h)

function(topotrain_use_torch target)
  target_link_libraries(${target} PUBLIC topotrain_torch)
  target_precompile_headers(${target} REUSE_FROM topotrain_pch)
endfunction()

# ccache caches a compile that uses the precompiled header only when it can preprocess it
# (gcc's -fpch-preprocess; launch/build.sh sets the sloppiness ccache needs as well).
if(CMAKE_CXX_COMPILER_LAUNCHER MATCHES "ccache")
  target_compile_options(topotrain_torch INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fpch-preprocess>)
endif()
