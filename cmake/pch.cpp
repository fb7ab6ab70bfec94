// Compiles cmake/torch_pch.h once; other targets reuse the result (cmake/TopotrainPch.cmake).
