// Metrics as JSON, written atomically.
#include "worker/training/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cpptorchrun::worker {
namespace {

std::string Number(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.6g", v);
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string ModesToJson(const std::vector<TrainMetrics::ModeFigures>& modes) {
  std::string out = "{";
  for (size_t i = 0; i < modes.size(); ++i) {
    const TrainMetrics::ModeFigures& f = modes[i];
    absl::StrAppend(&out, i > 0 ? ", " : "", Quote(f.mode), ": {\"steps\": ", f.steps,
                    ", \"step_seconds_median\": ", Number(f.step_seconds_median),
                    ", \"comm_wait_seconds\": ", Number(f.comm_wait_seconds),
                    ", \"allreduce_timed_steps\": ", f.allreduce_timed_steps,
                    ", \"allreduce_seconds\": ", Number(f.allreduce_seconds),
                    ", \"allreduce_hidden_seconds\": ", Number(f.allreduce_hidden_seconds), "}");
  }
  return out + "}";
}

}  // namespace

std::string MetricsToJson(const TrainMetrics& m) {
  return absl::StrCat("{\"world_size\": ", m.world_size, ", \"epochs\": ", m.epochs,
                      ", \"steps\": ", m.steps, ", \"samples\": ", m.samples,
                      ", \"train_seconds\": ", Number(m.train_seconds),
                      ", \"samples_per_s\": ", Number(m.samples_per_s),
                      ", \"cpu_seconds\": ", Number(m.cpu_seconds),
                      ", \"step_seconds_mean\": ", Number(m.step_seconds_mean),
                      ", \"step_seconds_median\": ", Number(m.step_seconds_median),
                      ", \"backward_seconds_mean\": ", Number(m.backward_seconds_mean),
                      ", \"comm_wait_seconds\": ", Number(m.comm_wait_seconds),
                      ", \"allreduce_timed_steps\": ", m.allreduce_timed_steps,
                      ", \"allreduce_seconds\": ", Number(m.allreduce_seconds),
                      ", \"allreduce_hidden_seconds\": ", Number(m.allreduce_hidden_seconds),
                      ", \"comm_hook\": ", Quote(m.comm_hook), ", \"bytes_sent\": ", m.bytes_sent,
                      ", \"bytes_sent_per_step\": ", Number(m.bytes_sent_per_step),
                      ", \"parameters_fingerprint\": ", Quote(m.parameters_fingerprint),
                      ", \"replicas_differing\": ", m.replicas_differing,
                      ", \"allreduce\": ", Quote(m.allreduce), ", \"hidden\": ", Quote(m.hidden),
                      ", \"optimizer\": ", Quote(m.optimizer), ", \"base_lr\": ", Number(m.base_lr),
                      ", \"by_mode\": ", ModesToJson(m.by_mode),
                      ", \"test_accuracy\": ", m.test_accuracy < 0 ? "null" : Number(m.test_accuracy),
                      ", \"final_loss\": ", Number(m.final_loss),
                      ", \"restart_count\": ", m.restart_count,
                      ", \"resumed_from_step\": ", m.resumed_from_step,
                      ", \"recoveries\": ", m.recoveries,
                      ", \"checkpoints_written\": ", m.checkpoints_written,
                      ", \"checkpoint_wait_seconds\": ", Number(m.checkpoint_wait_seconds),
                      ", \"backend\": ", Quote(m.backend), "}\n");
}

absl::Status WriteMetricsJson(const std::string& path, const TrainMetrics& metrics) {
  const std::string temp = path + ".tmp";
  std::FILE* f = std::fopen(temp.c_str(), "w");
  if (f == nullptr) {
    return absl::InternalError(absl::StrCat("cannot write ", temp, ": ", std::strerror(errno)));
  }
  const std::string json = MetricsToJson(metrics);
  bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace cpptorchrun::worker
