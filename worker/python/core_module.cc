// ps_train._core: the extension module's bindings. A Worker (python_worker.h) is one registered
// rank; shard_status reads the shards' reports as an observer. Every error of the shards or the
// transport reaches Python as ps_train.errors.PsError with the gRPC status code and the shard's
// message; a call waiting on the shards ends on Ctrl-C (py_support.h's CallThread).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/base/process_tuning.h"
#include "worker/delay_injector.h"
#include "worker/grpc_parameter_client.h"
#include "worker/python/py_convert.h"
#include "worker/python/py_support.h"
#include "worker/python/python_worker.h"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "The C++ side of ps_train: a worker rank's client of the parameter-server shards.";
  // gRPC's locks without Abseil's lock-order bookkeeping, as in ps_worker; the malloc settings
  // stay the interpreter's own.
  ps::TurnOffLockOrderChecks();

  // ps_train.errors.PsError(code, code_name, message): raised for every error of the shards or the
  // transport, with the gRPC status code.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ps::StatusError& e) {
      py::object error_class = py::module_::import("ps_train.errors").attr("PsError");
      const int code = static_cast<int>(e.status.code());
      py::object error = error_class(code, absl::StatusCodeToString(e.status.code()),
                                     std::string(e.status.message()));
      PyErr_SetObject(error_class.ptr(), error.ptr());
    }
  });

  py::class_<ps::WorkerConfig>(m, "WorkerConfig")
      .def(py::init<>())
      .def_readwrite("servers", &ps::WorkerConfig::servers)
      .def_readwrite("rank", &ps::WorkerConfig::rank)
      .def_readwrite("num_workers", &ps::WorkerConfig::num_workers)
      .def_readwrite("token_file", &ps::WorkerConfig::token_file)
      .def_readwrite("tls_ca", &ps::WorkerConfig::tls_ca)
      .def_readwrite("tls_cert", &ps::WorkerConfig::tls_cert)
      .def_readwrite("tls_key", &ps::WorkerConfig::tls_key)
      .def_readwrite("tls_server_name", &ps::WorkerConfig::tls_server_name)
      .def_readwrite("allow_plaintext_token", &ps::WorkerConfig::allow_plaintext_token)
      .def_readwrite("shared_memory", &ps::WorkerConfig::shared_memory)
      .def_readwrite("local_calls", &ps::WorkerConfig::local_calls)
      .def_readwrite("register_timeout_s", &ps::WorkerConfig::register_timeout_s)
      .def_readwrite("call_timeout_s", &ps::WorkerConfig::call_timeout_s)
      .def_readwrite("pull_timeout_s", &ps::WorkerConfig::pull_timeout_s)
      .def_readwrite("retry_s", &ps::WorkerConfig::retry_s)
      .def_readwrite("max_rejoins", &ps::WorkerConfig::max_rejoins);

  py::class_<ps::Worker>(m, "Worker")
      .def(py::init<ps::WorkerConfig,
                    const std::vector<std::pair<std::string, std::vector<int64_t>>>&,
                    const std::vector<std::tuple<std::string, int64_t, float>>&, int>(),
           py::arg("config"), py::arg("tensors"), py::arg("tables"), py::arg("buffer_sets") = 1)
      .def("register", &ps::Worker::Register)
      .def("declare_work", &ps::Worker::DeclareWork, py::arg("steps"), py::arg("samples_per_step"))
      .def("init_and_pull", &ps::Worker::InitAndPull)
      .def("step", &ps::Worker::Step, py::arg("num_samples"), py::arg("rows"))
      .def("pull_rows", &ps::Worker::PullRows, py::arg("table"), py::arg("keys"), py::arg("out"),
           py::arg("for_step"))
      .def("start_part", &ps::Worker::StartPart, py::arg("begin"), py::arg("end"),
           py::arg("num_samples"))
      .def("finish_parts", &ps::Worker::FinishParts, py::arg("num_samples"))
      .def("pipelined_step", &ps::Worker::PipelinedStep, py::arg("num_samples"), py::arg("rows"))
      .def("status", &ps::Worker::Status)
      .def("finish", &ps::Worker::Finish, py::arg("samples_per_step"), py::arg("wait_s"),
           py::arg("report_path") = "", py::arg("require_all_work") = false)
      .def("cancel", &ps::Worker::Cancel)
      .def(
          "weights_array",
          [](py::object self, int set) { return self.cast<ps::Worker&>().WeightsArray(set, self); },
          py::arg("set"))
      .def(
          "gradient_array",
          [](py::object self, int set) {
            return self.cast<ps::Worker&>().GradientArray(set, self);
          },
          py::arg("set"))
      .def_property_readonly("weights_set", &ps::Worker::weights_set)
      .def_property_readonly("gradient_set", &ps::Worker::gradient_set)
      .def_property_readonly("clock", &ps::Worker::clock)
      .def_property_readonly("size", &ps::Worker::size)
      .def_property_readonly("fingerprint", &ps::Worker::fingerprint)
      .def_property_readonly("shared_memory_shards", &ps::Worker::shared_memory_shards);

  // A straggler experiment's injected slowness, as ps_worker's --slowdown, --jitter and --pause
  // (worker/delay_injector.h): delay_for(step, work_s) is the seconds to sleep before the step's
  // push, given the step's own work. ValueError for a bad setting, naming it.
  py::class_<ps::DelayInjector>(m, "Delays")
      .def(py::init([](double slowdown, const std::string& jitter, const std::string& pause,
                       uint64_t seed, int rank) {
             ps::DelayOptions o;
             o.slowdown = slowdown;
             o.seed = seed;
             o.rank = rank;
             absl::Status s = ps::ParseJitter("PS_JITTER", jitter, &o);
             if (s.ok()) s = ps::ParsePause("PS_PAUSE", pause, &o);
             if (s.ok()) s = ps::ValidateDelayOptions(o);
             if (!s.ok()) throw py::value_error(std::string(s.message()));
             return ps::DelayInjector(o);
           }),
           py::arg("slowdown"), py::arg("jitter"), py::arg("pause"), py::arg("seed"),
           py::arg("rank"))
      .def("delay_for", [](ps::DelayInjector& delays, int64_t step, double work_s) {
        return absl::ToDoubleSeconds(delays.DelayFor(step, absl::Seconds(work_s)));
      });

  // The shards' reports (ps_ctl status --json's lines), read as an observer: no rank, no model.
  m.def(
      "shard_status",
      [](const ps::WorkerConfig& config) {
        if (config.servers.empty()) {
          throw ps::StatusError{absl::InvalidArgumentError("no servers")};
        }
        ps::GrpcClientOptions options = ps::ClientOptions(config);
        options.shared_memory = false;
        std::unique_ptr<ps::GrpcParameterClient> client =
            ps::ValueOrThrow(ps::GrpcParameterClient::Create(options));
        ps::GrpcParameterClient* raw = client.get();
        ps::CallThread calls;
        const std::vector<ps::ShardReport> reports =
            ps::ValueOrThrow(calls.Call<absl::StatusOr<std::vector<ps::ShardReport>>>(
                [raw] { return raw->Status(); }, [raw] { raw->Cancel(); }));
        return ps::ReportsJson(reports, config.servers);
      },
      py::arg("config"));
}
