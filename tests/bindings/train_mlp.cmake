# zoe-train-mlp's tests (train_mlp_test.cpp): run the built demo as a child process. Included from
# tests/bindings/CMakeLists.txt when the demo is built (OpenBLAS found).
if(TARGET zoe-train-mlp)
  # The demo's children run zoe's I/O and worker threads, but the test itself spawns processes
  # only: unit. Each case trains tiny models for a few seconds.
  zoe_add_test(NAME train_mlp_tests
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/train_mlp_test.cpp
    LIBS zoe_io_test_support nlohmann_json::nlohmann_json
    TIMEOUT 300)
  target_include_directories(train_mlp_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests/common)
  target_compile_definitions(train_mlp_tests PRIVATE ZOE_TRAIN_MLP_PATH="$<TARGET_FILE:zoe-train-mlp>")
  add_dependencies(train_mlp_tests zoe-train-mlp)

  # The crash soak (train_mlp_soak_test.cpp): SIGKILL at seeded random moments, then --resume, round
  # after round. Label soak; ZOE_SOAK_ROUNDS=50 in the environment runs the full 50 rounds.
  zoe_add_test(NAME train_mlp_soak_tests
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/train_mlp_soak_test.cpp
    LIBS zoe_io_test_support nlohmann_json::nlohmann_json
    LABELS soak
    TIMEOUT 1800)
  target_include_directories(train_mlp_soak_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests/common)
  target_compile_definitions(train_mlp_soak_tests PRIVATE ZOE_TRAIN_MLP_PATH="$<TARGET_FILE:zoe-train-mlp>")
  add_dependencies(train_mlp_soak_tests zoe-train-mlp)

  # The demo on 4 ranks: the test process itself is one, and starts mpirun (MPIEXEC_EXECUTABLE with
  # ZOE_MPIRUN_FLAGS, as zoe_add_mpi_test's cases) as a child. Label mpi, and the mpi lock: two
  # mpirun jobs never share the cores at once.
  if(MPIEXEC_EXECUTABLE)
    zoe_add_test(NAME train_mlp_mpi_tests
      SOURCES ${CMAKE_CURRENT_LIST_DIR}/train_mlp_mpi_test.cpp ${CMAKE_CURRENT_LIST_DIR}/train_mlp_checkpoint_mpi_test.cpp
      LIBS zoe_io_test_support nlohmann_json::nlohmann_json
      LABELS mpi
      RESOURCE_LOCK mpi
      TIMEOUT 300)
    target_include_directories(train_mlp_mpi_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests/common)
    list(JOIN ZOE_MPIRUN_FLAGS " " mpirun_flags)
    target_compile_definitions(train_mlp_mpi_tests PRIVATE
      ZOE_TRAIN_MLP_PATH="$<TARGET_FILE:zoe-train-mlp>"
      ZOE_MPIRUN="${MPIEXEC_EXECUTABLE} ${mpirun_flags}"
      ZOE_DEMO_CONFIGS_DIR="${PROJECT_SOURCE_DIR}/bindings/demo/configs")
    add_dependencies(train_mlp_mpi_tests zoe-train-mlp)
  endif()
endif()
