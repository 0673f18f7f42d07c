//===- Watchdog.cpp - A deadline on every wait for other ranks ------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Watchdog.h"

#include "runtime/common/Errors.h"

#include <sched.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <map>

using namespace loomrt;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kQuestionTag = 1;
constexpr int kAnswerTag = 2;
/// An answer: what the answering rank waits in, NUL-terminated.
constexpr int kAnswerBytes = 512;

MPI_Comm questions = MPI_COMM_NULL;
double timeoutSeconds = 0;
/// What this rank waits in now (null outside waitFor).
const watchdog::Operation *current = nullptr;

/// Answers sent and not yet known to be delivered (MPI owns the buffers).
struct Answer {
  MPI_Request request;
  char text[kAnswerBytes];
};
std::deque<Answer> answers;

/// Answers every question that has arrived.
void serveQuestions() {
  for (;;) {
    int pending = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kQuestionTag, questions, &pending,
                   &status) != MPI_SUCCESS ||
        !pending)
      break;
    char ignored = 0;
    MPI_Recv(&ignored, 1, MPI_CHAR, status.MPI_SOURCE, kQuestionTag, questions,
             MPI_STATUS_IGNORE);
    Answer &a = answers.emplace_back();
    std::snprintf(a.text, sizeof a.text, "%s",
                  current ? current->describe().c_str() : "");
    MPI_Isend(a.text, kAnswerBytes, MPI_CHAR, status.MPI_SOURCE, kAnswerTag,
              questions, &a.request);
  }
  while (!answers.empty()) {
    int sent = 0;
    MPI_Test(&answers.front().request, &sent, MPI_STATUS_IGNORE);
    if (!sent)
      break;
    answers.pop_front();
  }
}

/// Asks every other member what it waits in, keeps waiting (and answering)
/// for `grace` seconds, and returns the report, or "" if `done` became true
/// meanwhile.
std::string investigate(const watchdog::Operation &op,
                        const std::function<bool()> &done, double grace) {
  int self = 0;
  MPI_Comm_rank(questions, &self);
  struct Peer {
    MPI_Request ask, reply;
    char text[kAnswerBytes];
    bool answered = false;
  };
  std::map<int32_t, Peer> peers;
  char question = 0;
  for (int32_t r : *op.members) {
    if (r == self)
      continue;
    Peer &p = peers[r];
    MPI_Isend(&question, 1, MPI_CHAR, r, kQuestionTag, questions, &p.ask);
    MPI_Irecv(p.text, kAnswerBytes, MPI_CHAR, r, kAnswerTag, questions,
              &p.reply);
  }
  Clock::time_point end =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(grace));
  bool completed = false;
  while (Clock::now() < end) {
    if (done()) {
      completed = true;
      break;
    }
    serveQuestions();
    bool all = true;
    for (auto &[r, p] : peers) {
      if (!p.answered) {
        int got = 0;
        MPI_Test(&p.reply, &got, MPI_STATUS_IGNORE);
        p.answered = got;
      }
      all &= p.answered;
    }
    if (all)
      break;
    sched_yield();
  }
  // Late answers are not waited for: the job ends, or the exchange is
  // abandoned because the operation completed after all.
  for (auto &[r, p] : peers) {
    if (!p.answered) {
      MPI_Cancel(&p.reply);
      MPI_Request_free(&p.reply);
    }
    MPI_Request_free(&p.ask);
  }
  if (completed || done())
    return "";

  std::string missing, elsewhere;
  for (auto &[r, p] : peers) {
    if (!p.answered) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      continue;
    }
    p.text[kAnswerBytes - 1] = '\0';
    if (op.describe() == p.text)
      continue;
    elsewhere += "; rank " + std::to_string(r) + " waits in " +
                 (p.text[0] ? std::string(p.text) : std::string("nothing"));
  }
  std::string report;
  if (!missing.empty())
    report = "rank" + std::string(missing.find(',') == std::string::npos
                                      ? " "
                                      : "s ") +
             missing + " did not arrive (no answer within " +
             std::to_string(int(grace + 0.5)) +
             " s: stopped, dead, or still computing)";
  report += elsewhere;
  if (report.empty())
    report = "every member arrived, yet it did not complete";
  else if (report[0] == ';')
    report = report.substr(2);
  return report;
}

} // namespace

void watchdog::start(MPI_Comm world) {
  if (questions == MPI_COMM_NULL)
    checkMpi(MPI_Comm_dup(world, &questions), "MPI_Comm_dup");
}

void watchdog::stop() {
  for (Answer &a : answers) {
    MPI_Cancel(&a.request);
    MPI_Request_free(&a.request);
  }
  answers.clear();
  if (questions != MPI_COMM_NULL)
    MPI_Comm_free(&questions);
  questions = MPI_COMM_NULL;
  timeoutSeconds = 0;
}

void watchdog::setTimeout(double seconds) {
  timeoutSeconds = seconds > 0 ? seconds : 0;
}

double watchdog::timeout() { return timeoutSeconds; }

std::string watchdog::Operation::describe() const {
  return std::string(name) + " #" + std::to_string(seq) + " over the " +
         membersAre + " " + rankList(*members);
}

std::string watchdog::rankList(const std::vector<int32_t> &worldRanks) {
  std::string s = "[";
  for (size_t i = 0; i < worldRanks.size(); ++i)
    s += (i ? ", " : "") + std::to_string(worldRanks[i]);
  return s + "]";
}

void watchdog::waitFor(const Operation &op, const std::function<bool()> &done) {
  if (done())
    return;
  if (questions == MPI_COMM_NULL) { // before loomrt_init: nobody to ask
    while (!done())
      sched_yield();
    return;
  }
  current = &op;
  const Clock::time_point begin = Clock::now();
  for (;;) {
    if (done())
      break;
    serveQuestions();
    if (timeoutSeconds > 0 &&
        std::chrono::duration<double>(Clock::now() - begin).count() >
            timeoutSeconds) {
      // Members entering late still get a few seconds to answer.
      double grace = std::min(30.0, std::max(2.0, timeoutSeconds / 10));
      std::string report = investigate(op, done, grace);
      if (report.empty())
        break;
      fatal(op.fn,
            "%s did not complete within %g minutes "
            "(--distributed-timeout-minutes): %s",
            op.describe().c_str(), timeoutSeconds / 60, report.c_str());
    }
    sched_yield();
  }
  current = nullptr;
}

int watchdog::waitAll(const Operation &op, int n, MPI_Request *requests,
                      MPI_Status *statuses) {
  int rc = MPI_SUCCESS;
  waitFor(op, [&] {
    int flag = 0;
    rc = MPI_Testall(n, requests, &flag, statuses);
    return flag || rc != MPI_SUCCESS;
  });
  return rc;
}
