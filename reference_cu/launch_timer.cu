// launch_timer.cu: the C++ floor of kernel submission, for `python -m bench perf`.
//
// What it measures (host clock, std::chrono::steady_clock, on one non-blocking stream):
//   enqueue_per_launch   cuLaunchKernel of an empty kernel <<<1, 32>>> in batches of BATCH (32) back to back;
//                        one sample = (time to enqueue the batch) / BATCH; the stream is synchronized
//                        before each batch starts and after it is enqueued (outside the interval)
//   launch_sync          one cuLaunchKernel + cuStreamSynchronize
//   graph_enqueue        cuGraphLaunch of a 1-node graph (the same launch, stream-captured), batches of BATCH
//   graph_sync           one cuGraphLaunch + cuStreamSynchronize
//   sync_no_work         cuStreamSynchronize on the idle stream (recorded, never subtracted)
// The kernel has no parameters; it is launched through the DRIVER API (cuLaunchKernel, kernelParams = NULL)
// with the CUfunction of the runtime-registered kernel (cudaGetFuncBySymbol), which is what the Python harness
// does with Numba's compiled kernels (numba_softmax/launch/driver.py: PreparedLaunch.enqueue).
//
// Build (bench/perf.py does this into a temporary folder at run time):
//   nvcc -O2 -arch=sm_90 -std=c++17 -o launch_timer launch_timer.cu -lcuda
// Run:   launch_timer [batches=200] [warmup_batches=20]      (launch_timer --selftest: synthetic JSON, no GPU)
// Output: ONE JSON object on stdout (raw samples in microseconds plus median/p10/p90 computed with numpy's
// "linear" percentile method, which bench/perf.py recomputes and cross-checks). Errors go to stderr with a
// nonzero exit status.
//
// This file is not part of `python -m bench build-reference` (that builds the kernel modules listed in
// bench/reference_build.py); it is a host program of its own.

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" __global__ void launch_timer_empty_kernel() {}

static const int BATCH = 32;

#define CU_CHECK(call)                                                                                       \
    do {                                                                                                     \
        CUresult status_ = (call);                                                                           \
        if (status_ != CUDA_SUCCESS) {                                                                       \
            const char* name_ = nullptr;                                                                     \
            const char* text_ = nullptr;                                                                     \
            cuGetErrorName(status_, &name_);                                                                 \
            cuGetErrorString(status_, &text_);                                                               \
            std::fprintf(stderr, "launch_timer: %s failed (line %d): %s: %s\n", #call, __LINE__,           \
                         name_ ? name_ : "?", text_ ? text_ : "?");                                          \
            std::exit(2);                                                                                    \
        }                                                                                                    \
    } while (0)

#define RT_CHECK(call)                                                                                       \
    do {                                                                                                     \
        cudaError_t status_ = (call);                                                                        \
        if (status_ != cudaSuccess) {                                                                        \
            std::fprintf(stderr, "launch_timer: %s failed (line %d): %s: %s\n", #call, __LINE__,           \
                         cudaGetErrorName(status_), cudaGetErrorString(status_));                            \
            std::exit(2);                                                                                    \
        }                                                                                                    \
    } while (0)

static inline double now_us() {
    using clock = std::chrono::steady_clock;
    return std::chrono::duration<double, std::micro>(clock::now().time_since_epoch()).count();
}

// numpy.percentile(values, q, method="linear")
static double percentile(std::vector<double> values, double q) {
    std::sort(values.begin(), values.end());
    const double h = (values.size() - 1) * (q / 100.0);
    const size_t lo = static_cast<size_t>(std::floor(h));
    const size_t hi = std::min(lo + 1, values.size() - 1);
    return values[lo] + (h - lo) * (values[hi] - values[lo]);
}

static std::string metric_json(const char* name, const char* per, const std::vector<double>& samples) {
    std::string out = "\"";
    out += name;
    out += "\": {\"per\": \"";
    out += per;
    char buf[128];
    std::snprintf(buf, sizeof buf, "\", \"n\": %zu, \"median_us\": %.6f, \"p10_us\": %.6f, \"p90_us\": %.6f, ",
                  samples.size(), percentile(samples, 50.0), percentile(samples, 10.0), percentile(samples, 90.0));
    out += buf;
    out += "\"samples_us\": [";
    for (size_t i = 0; i < samples.size(); ++i) {
        std::snprintf(buf, sizeof buf, "%s%.6f", i ? ", " : "", samples[i]);
        out += buf;
    }
    out += "]}";
    return out;
}

static void print_report(const char* device_name, int driver_version, int runtime_version, size_t node_count,
                         int batches, int warmup, const std::vector<double>& enqueue,
                         const std::vector<double>& launch_sync, const std::vector<double>& graph_enqueue,
                         const std::vector<double>& graph_sync, const std::vector<double>& sync_no_work) {
    std::string json = "{\"tool\": \"launch_timer\", \"clock\": \"std::chrono::steady_clock\", ";
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "\"device_name\": \"%s\", \"driver_version\": %d, \"runtime_version\": %d, "
                  "\"kernel\": \"launch_timer_empty_kernel<<<1, 32>>> (no parameters) via cuLaunchKernel\", "
                  "\"graph_nodes\": %zu, \"batch\": %d, \"batches\": %d, \"warmup_batches\": %d, ",
                  device_name, driver_version, runtime_version, node_count, BATCH, batches, warmup);
    json += buf;
    json += "\"metrics\": {";
    json += metric_json("enqueue_per_launch", "launch (batch of 32 / 32)", enqueue) + ", ";
    json += metric_json("launch_sync", "launch + synchronize", launch_sync) + ", ";
    json += metric_json("graph_enqueue", "replay (batch of 32 / 32)", graph_enqueue) + ", ";
    json += metric_json("graph_sync", "replay + synchronize", graph_sync) + ", ";
    json += metric_json("sync_no_work", "synchronize, idle stream", sync_no_work);
    json += "}}";
    std::printf("%s\n", json.c_str());
}

// `launch_timer --selftest`: the same JSON from fixed synthetic samples, touching no CUDA API (so the
// output format can be checked on a machine without a GPU; tests/cpu/test_perf_tool.py does).
static int selftest() {
    std::vector<double> m[5];
    for (int k = 0; k < 5; ++k)
        for (int i = 0; i < 37; ++i) m[k].push_back(1.0 + k + 0.25 * ((i * 7) % 11) + 0.001 * i);
    print_report("selftest (no device)", 0, 0, 1, 37, 0, m[0], m[1], m[2], m[3], m[4]);
    return 0;
}

int main(int argc, char** argv) {
    if (argc > 1 && std::string(argv[1]) == "--selftest") return selftest();
    const int batches = argc > 1 ? std::atoi(argv[1]) : 200;
    const int warmup = argc > 2 ? std::atoi(argv[2]) : 20;
    if (batches < 1 || warmup < 0) {
        std::fprintf(stderr, "usage: %s [batches>=1] [warmup_batches>=0]\n", argv[0]);
        return 64;
    }

    RT_CHECK(cudaSetDevice(0));
    RT_CHECK(cudaFree(nullptr));  // creates / retains the primary context and makes it current
    CUcontext context = nullptr;
    CU_CHECK(cuCtxGetCurrent(&context));
    if (context == nullptr) {
        std::fprintf(stderr, "launch_timer: no current CUDA context after cudaFree(0)\n");
        return 2;
    }
    CUdevice device;
    CU_CHECK(cuCtxGetDevice(&device));
    char device_name[256] = {0};
    CU_CHECK(cuDeviceGetName(device_name, sizeof device_name - 1, device));
    int driver_version = 0, runtime_version = 0;
    CU_CHECK(cuDriverGetVersion(&driver_version));
    RT_CHECK(cudaRuntimeGetVersion(&runtime_version));

    cudaFunction_t runtime_function = nullptr;
    RT_CHECK(cudaGetFuncBySymbol(&runtime_function, reinterpret_cast<const void*>(launch_timer_empty_kernel)));
    CUfunction function = reinterpret_cast<CUfunction>(runtime_function);  // both are CUfunc_st*

    CUstream stream;
    CU_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

    auto launch = [&]() { CU_CHECK(cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr)); };

    // The 1-node graph: the same launch, stream-captured.
    CUgraph graph;
    CUgraphExec graph_exec;
    CU_CHECK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    launch();
    CU_CHECK(cuStreamEndCapture(stream, &graph));
    size_t node_count = 0;
    CU_CHECK(cuGraphGetNodes(graph, nullptr, &node_count));
    CU_CHECK(cuGraphInstantiate(&graph_exec, graph, 0));
    auto replay = [&]() { CU_CHECK(cuGraphLaunch(graph_exec, stream)); };

    // Warm-up: module load, first launches, first replay.
    for (int b = 0; b < warmup; ++b) {
        for (int i = 0; i < BATCH; ++i) launch();
        for (int i = 0; i < BATCH; ++i) replay();
        CU_CHECK(cuStreamSynchronize(stream));
    }
    CU_CHECK(cuStreamSynchronize(stream));

    std::vector<double> enqueue, launch_sync, graph_enqueue, graph_sync, sync_no_work;
    for (int b = 0; b < batches; ++b) {
        CU_CHECK(cuStreamSynchronize(stream));
        double t0 = now_us();
        for (int i = 0; i < BATCH; ++i) launch();
        double t1 = now_us();
        CU_CHECK(cuStreamSynchronize(stream));
        enqueue.push_back((t1 - t0) / BATCH);
    }
    for (int b = 0; b < batches; ++b) {
        double t0 = now_us();
        launch();
        CU_CHECK(cuStreamSynchronize(stream));
        launch_sync.push_back(now_us() - t0);
    }
    for (int b = 0; b < batches; ++b) {
        CU_CHECK(cuStreamSynchronize(stream));
        double t0 = now_us();
        for (int i = 0; i < BATCH; ++i) replay();
        double t1 = now_us();
        CU_CHECK(cuStreamSynchronize(stream));
        graph_enqueue.push_back((t1 - t0) / BATCH);
    }
    for (int b = 0; b < batches; ++b) {
        double t0 = now_us();
        replay();
        CU_CHECK(cuStreamSynchronize(stream));
        graph_sync.push_back(now_us() - t0);
    }
    for (int b = 0; b < batches; ++b) {
        CU_CHECK(cuStreamSynchronize(stream));
        double t0 = now_us();
        CU_CHECK(cuStreamSynchronize(stream));
        sync_no_work.push_back(now_us() - t0);
    }

    print_report(device_name, driver_version, runtime_version, node_count, batches, warmup, enqueue, launch_sync,
                 graph_enqueue, graph_sync, sync_no_work);

    CU_CHECK(cuGraphExecDestroy(graph_exec));
    CU_CHECK(cuGraphDestroy(graph));
    CU_CHECK(cuStreamDestroy(stream));
    return 0;
}
