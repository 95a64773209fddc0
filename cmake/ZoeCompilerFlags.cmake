# Warnings and sanitizers for every zoe target, through one interface target they all link.
add_library(zoe_build_flags INTERFACE)
add_library(zoe::build_flags ALIAS zoe_build_flags)

target_compile_options(zoe_build_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                            -Wold-style-cast -Wcast-align -Woverloaded-virtual
                            -Wconversion -Wsign-conversion -Wimplicit-fallthrough
                            # designated initializers leave defaulted members out on purpose
                            -Wno-missing-field-initializers>
  # Bit-identical arithmetic across scalar, SIMD and CUDA paths: no contraction into FMAs
  # behind our back.
  $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>
  $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false>)

if(ZOE_WARNINGS_AS_ERRORS)
  target_compile_options(zoe_build_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
endif()

if(ZOE_SANITIZE)
  target_compile_options(zoe_build_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${ZOE_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all>)
  target_link_options(zoe_build_flags INTERFACE -fsanitize=${ZOE_SANITIZE})
endif()
