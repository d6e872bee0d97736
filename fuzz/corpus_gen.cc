// Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/):
// small valid inputs built with the project's own encoders, and near-valid
// ones (one field wrong), so that fuzzing starts past the first checks.
//
// Usage: fuzz_corpus_gen OUT_DIR (normally fuzz/corpus). Run by hand when
// a format changes; the files are committed.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "common/connect_proof.h"
#include "common/layout.h"
#include "common/protocol.h"
#include "common/record.h"
#include "common/token.h"
#include "common/transport/rejection.h"
#include "common/transport/tcp/tcp_frame.h"
#include "fuzz/connect_fuzz_keys.h"
#include "proto/rkv.pb.h"

namespace {

using namespace rkv;
using Bytes = std::vector<uint8_t>;
namespace tcp = rkv::transport::tcp;

std::filesystem::path g_out;

void Write(const std::string& target, const std::string& name, const Bytes& bytes) {
  const std::filesystem::path dir = g_out / target;
  std::filesystem::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

template <typename T>
void Put(Bytes& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

void Put(Bytes& out, std::string_view s) { out.insert(out.end(), s.begin(), s.end()); }

Bytes Concat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Bytes Record(std::string_view key, std::string_view value, uint16_t flags = 0, uint64_t version = 0,
             int64_t expires_at_ms = 0) {
  Bytes out(layout::BlockBytes(key.size(), value.size()));
  EncodeRecord(out, key, value, version, flags, expires_at_ms);
  return out;
}

Bytes Frame(tcp::FrameType type, uint64_t seq, std::string_view payload, uint64_t addr = 0, uint32_t rkey = 0,
            uint32_t op_len = 0, int32_t status = 0) {
  tcp::FrameHeader h = tcp::MakeHeader(type, seq);
  h.addr = type == tcp::FrameType::kConnect ? tcp::kHelloMagic : addr;
  h.rkey = rkey;
  h.op_len = op_len;
  h.status = status;
  h.payload_len = static_cast<uint32_t>(payload.size());
  Bytes out;
  Put(out, h);
  Put(out, payload);
  return out;
}

Bytes Serialized(const google::protobuf::MessageLite& m) {
  const std::string s = m.SerializeAsString();
  return Bytes(s.begin(), s.end());
}

void TcpFrames() {
  using tcp::FrameType;
  const std::string connect(36, 'c');
  Write("tcp_frame", "connect", Frame(FrameType::kConnect, 0, connect));
  Write("tcp_frame", "accept", Frame(FrameType::kAccept, 0, std::string(96, 'a')));
  Write("tcp_frame", "reject", Frame(FrameType::kReject, 0, "busy"));
  Write("tcp_frame", "read_req", Frame(FrameType::kReadReq, 1, "", 0x1000, 5, 64));
  Write("tcp_frame", "write_then_send",
        Concat({Frame(FrameType::kWrite, 1, std::string(32, 'w'), 0x1000, 5),
                Frame(FrameType::kSend, 2, std::string(24, 's'))}));
  Write("tcp_frame", "responses",
        Concat({Frame(FrameType::kReadResp, 1, std::string(16, 'r')),
                Frame(FrameType::kWriteNak, 2, "remote access error", 0, 0, 0, 7),
                Frame(FrameType::kSendAck, 3, "")}));
  Bytes truncated = Frame(FrameType::kSend, 1, std::string(64, 's'));
  truncated.resize(truncated.size() - 10);
  Write("tcp_frame", "truncated_send", truncated);
  Bytes bad_magic = Frame(FrameType::kSend, 1, "x");
  bad_magic[0] ^= 1;
  Write("tcp_frame", "bad_magic", bad_magic);
  Write("tcp_frame", "read_too_long", Frame(FrameType::kReadReq, 1, "", 0, 5, tcp::kMaxOpBytes + 1));

  // tcp_connection: a work byte (2 READs, all signaled, a SEND, 2
  // receives = 0x2e), then the peer's frames; rkey 1 = the read/write
  // region, 2 = read-only.
  const uint8_t work = 2 | 4 | 8 | (2 << 4);
  Write("tcp_connection", "answers_all",
        Concat({Bytes{work}, Frame(FrameType::kReadResp, 1, std::string(16, 'a')),
                Frame(FrameType::kReadResp, 2, std::string(32, 'b')), Frame(FrameType::kSendAck, 3, ""),
                Frame(FrameType::kSend, 9, std::string(20, 'm')), Frame(FrameType::kSend, 10, std::string(40, 'n'))}));
  Write("tcp_connection", "peer_reads_and_writes",
        Concat({Bytes{0}, Frame(FrameType::kReadReq, 1, "", 64, 1, 128), Frame(FrameType::kWrite, 2, "hello", 256, 1),
                Frame(FrameType::kReadReq, 3, "", 0, 2, 16)}));
  Write("tcp_connection", "write_to_read_only",
        Concat({Bytes{0}, Frame(FrameType::kWrite, 1, "nope", 0, 2), Frame(FrameType::kSend, 2, "after")}));
  Write("tcp_connection", "read_past_region", Concat({Bytes{0}, Frame(FrameType::kReadReq, 1, "", 4000, 1, 200)}));
  Write("tcp_connection", "nak_and_unknown_response",
        Concat({Bytes{work}, Frame(FrameType::kReadResp, 1, "denied", 0, 0, 0, 7),
                Frame(FrameType::kSendAck, 42, "")}));
  Write("tcp_connection", "wrong_response_type",
        Concat({Bytes{work}, Frame(FrameType::kSendAck, 1, ""), Frame(FrameType::kAccept, 0, "x")}));
  Write("tcp_connection", "send_too_long_for_receive",
        Concat({Bytes{0x10}, Frame(FrameType::kSend, 1, std::string(100, 'z'))}));
}

void Records() {
  Write("record", "put", Record("key", "value"));
  Write("record", "tombstone", Record("gone", "", layout::kBlockFlagTombstone));
  Write("record", "versioned", Record("k", std::string(100, 'v'), 0, 57));
  Write("record", "expiring", Record("k", "v", 0, 9, 1'700'000'000'000));
  Bytes torn = Record("key", "value");
  torn[30] ^= 0xff;
  Write("record", "bad_checksum", torn);
  Bytes cut = Record("key", std::string(40, 'v'));
  cut.resize(40);
  Write("record", "truncated", cut);
  Bytes flags = Record("key", "value");
  flags[10] = 0x80;
  Write("record", "unknown_flag", flags);
}

Bytes Request(protocol::Op op, uint64_t offset, uint32_t length) {
  protocol::RequestMsg m{};
  m.op = static_cast<uint8_t>(op);
  m.length = length;
  m.request_id = 1;
  m.ring_offset = offset;
  if (op == protocol::Op::kReplicatePut || op == protocol::Op::kReplicateDelete) m.map_version = 1;
  Bytes out;
  Put(out, m);
  return out;
}

void Apply() {
  // flags, count - 1, then per message its length and bytes, then the ring.
  const Bytes put = Record("key", "value");
  const Bytes del = Record("key", "", layout::kBlockFlagTombstone);
  Bytes ring = put;
  ring.resize(128, 0);
  ring.insert(ring.end(), del.begin(), del.end());
  const auto len = [](const Bytes& m) { return Bytes{static_cast<uint8_t>(m.size())}; };
  const Bytes m_put = Request(protocol::Op::kPut, 0, static_cast<uint32_t>(put.size()));
  const Bytes m_del = Request(protocol::Op::kDelete, 128, static_cast<uint32_t>(del.size()));
  Write("apply", "put", Concat({Bytes{0, 0}, len(m_put), m_put, ring}));
  Write("apply", "put_delete", Concat({Bytes{0, 1}, len(m_put), m_put, len(m_del), m_del, ring}));
  Write("apply", "put_delete_delete",
        Concat({Bytes{0, 2}, len(m_put), m_put, len(m_del), m_del, len(m_del), m_del, ring}));
  const Bytes m_odd = Request(protocol::Op::kPut, 8, static_cast<uint32_t>(put.size()));
  const Bytes m_out = Request(protocol::Op::kPut, 4096, 64);
  Bytes m_op = m_put;
  m_op[0] = 9;
  Bytes m_short = m_put;
  m_short.resize(20);
  Write("apply", "bad_requests",
        Concat({Bytes{0, 3}, len(m_odd), m_odd, len(m_out), m_out, len(m_op), m_op, len(m_short), m_short, ring}));
  // Conditional PUTs: if absent (written, then refused), then if the
  // version is 1 (written) and 1 again (refused).
  protocol::RequestMsg absent{};
  std::memcpy(&absent, m_put.data(), sizeof(absent));
  absent.condition = static_cast<uint8_t>(protocol::Condition::kAbsent);
  protocol::RequestMsg is_v1 = absent;
  is_v1.condition = static_cast<uint8_t>(protocol::Condition::kVersionIs);
  is_v1.expected_version = 1;
  Bytes m_absent;
  Put(m_absent, absent);
  Bytes m_is_v1;
  Put(m_is_v1, is_v1);
  Write("apply", "conditional_puts", Concat({Bytes{0, 3}, len(m_absent), m_absent, len(m_absent), m_absent,
                                              len(m_is_v1), m_is_v1, len(m_is_v1), m_is_v1, ring}));
  Bytes torn = ring;
  torn[40] ^= 1;
  Write("apply", "torn_then_resealed", Concat({Bytes{1, 0}, len(m_put), m_put, torn}));
  Write("apply", "torn", Concat({Bytes{0, 0}, len(m_put), m_put, torn}));
  Bytes versioned = Record("key", "value", 0, 5);
  versioned.resize(128, 0);
  Write("apply", "nonzero_version", Concat({Bytes{0, 0}, len(m_put), m_put, versioned}));
  // On a replication connection (flag bit 1): records carry versions.
  Bytes replica_ring = Record("key", "value", 0, 5);
  replica_ring.resize(128, 0);
  const Bytes replica_del = Record("key", "", layout::kBlockFlagTombstone, 5);
  replica_ring.insert(replica_ring.end(), replica_del.begin(), replica_del.end());
  const Bytes m_rput = Request(protocol::Op::kReplicatePut, 0, static_cast<uint32_t>(put.size()));
  const Bytes m_rdel = Request(protocol::Op::kReplicateDelete, 128, static_cast<uint32_t>(replica_del.size()));
  Write("apply", "replica_put_delete", Concat({Bytes{2, 2}, len(m_rput), m_rput, len(m_rput), m_rput, len(m_rdel),
                                               m_rdel, replica_ring}));
  Write("apply", "replica_op_from_client", Concat({Bytes{0, 0}, len(m_rput), m_rput, replica_ring}));
  Write("apply", "client_op_from_peer", Concat({Bytes{2, 0}, len(m_put), m_put, ring}));
  // Applied together (flag bit 2, Applier::ApplyBatch): a PUT of "key", a
  // PUT of "other" in the same group, then the DELETE of "key" in the next
  // one; and the conditional PUTs, each of "key", in groups of one.
  const Bytes other = Record("other", "value2");
  Bytes batch_ring = ring;
  batch_ring.resize(256, 0);
  batch_ring.insert(batch_ring.end(), other.begin(), other.end());
  const Bytes m_other = Request(protocol::Op::kPut, 256, static_cast<uint32_t>(other.size()));
  Write("apply", "batch_put_other_delete",
        Concat({Bytes{4, 2}, len(m_put), m_put, len(m_other), m_other, len(m_del), m_del, batch_ring}));
  Write("apply", "batch_conditional_puts", Concat({Bytes{4, 3}, len(m_absent), m_absent, len(m_absent), m_absent,
                                                    len(m_is_v1), m_is_v1, len(m_is_v1), m_is_v1, ring}));
  // Lookups (Applier::Locate): of "key" before its PUT (absent), after it
  // (found, its block landing), after its DELETE; and one whose landing
  // slot is too small for the block.
  const Bytes look = Record("key", "");
  Bytes lookup_ring = ring;
  lookup_ring.resize(256, 0);
  lookup_ring.insert(lookup_ring.end(), look.begin(), look.end());
  protocol::RequestMsg get{};
  get.op = static_cast<uint8_t>(protocol::Op::kGet);
  get.length = static_cast<uint32_t>(look.size());
  get.request_id = 1;
  get.ring_offset = 256;
  get.landing_addr = 0x10000;
  get.landing_rkey = 7;
  get.landing_bytes = 4096;
  Bytes m_get;
  Put(m_get, get);
  get.landing_bytes = layout::kBlockHeaderBytes;
  Bytes m_get_small;
  Put(m_get_small, get);
  Write("apply", "lookups", Concat({Bytes{0, 4}, len(m_get), m_get, len(m_put), m_put, len(m_get), m_get,
                                    len(m_get_small), m_get_small, len(m_del), m_del, lookup_ring}));
}

void Connect() {
  // Proofs answer the first challenges of fuzz::StoppedChallenges, the
  // target's (fuzz/connect_fuzz_keys.h).
  server::ConnectChallenges challenges = fuzz::StoppedChallenges();
  const protocol::ClientConnectParams client = protocol::MakeClientParams(0x1234, fuzz::kClientToken);
  Bytes hello;
  Put(hello, protocol::MakeClientRequest(client, nullptr));
  Write("connect_request", "hello", hello);
  const protocol::Nonce nonce = challenges.Issue();
  Bytes valid;
  Put(valid, protocol::MakeClientRequest(client, &nonce));
  Write("connect_request", "valid", valid);
  Bytes padded = valid;
  padded.resize(protocol::kMaxConnectPrivateData + 8, 0);
  Write("connect_request", "padded", padded);
  Bytes short_data = valid;
  short_data.resize(20);
  Write("connect_request", "short", short_data);
  protocol::ClientConnectParams other = client;
  other.protocol_version = protocol::kProtocolVersion + 1;
  Bytes version;
  Put(version, protocol::MakeClientRequest(other, &nonce));
  Write("connect_request", "other_version", version);
  Bytes token;
  Put(token, protocol::MakeClientRequest(protocol::MakeClientParams(0x1234, "not-the-token"), &nonce));
  Write("connect_request", "wrong_token", token);
  protocol::Nonce foreign = nonce;
  foreign[protocol::kNonceBytes - 1] ^= 1;
  Bytes foreign_tag;
  Put(foreign_tag, protocol::MakeClientRequest(client, &foreign));
  Write("connect_request", "foreign_challenge", foreign_tag);

  const protocol::PeerConnectParams peer = protocol::MakePeerParams(0x5EED, 3, fuzz::kClusterToken);
  Bytes peer_hello;
  Put(peer_hello, protocol::MakePeerRequest(peer, nullptr));
  Write("connect_request", "peer_hello", peer_hello);
  const protocol::Nonce peer_nonce = challenges.Issue();
  Bytes peer_valid;
  Put(peer_valid, protocol::MakePeerRequest(peer, &peer_nonce));
  Write("connect_request", "peer", peer_valid);
  Bytes peer_cut = peer_valid;
  peer_cut.resize(offsetof(protocol::PeerConnectData, nonce));
  Write("connect_request", "peer_cut", peer_cut);
  Bytes peer_as_client;
  Put(peer_as_client, protocol::MakePeerRequest(protocol::MakePeerParams(0x5EED, 3, fuzz::kClientToken), &peer_nonce));
  Write("connect_request", "peer_with_client_token", peer_as_client);
}

protocol::AcceptData ValidAccept() {
  protocol::AcceptData a{};
  a.magic = protocol::kAcceptMagic;
  a.protocol_version = protocol::kProtocolVersion;
  a.layout_version = layout::kLayoutVersion;
  a.epoch = 3;
  a.index = {0x10000, layout::IndexBytes(1024), 11, 0};
  a.heap = {0x200000, 1 << 20, 12, 0};
  a.ring = {0x900000, 256 << 10, 13, 0};
  a.request_credits = 16;
  a.max_key_bytes = 1024;
  a.max_value_bytes = 64 << 10;
  a.grace_period_us = 100000;
  return a;
}

void Accept() {
  Bytes valid;
  Put(valid, ValidAccept());
  Write("accept_data", "valid", valid);
  Bytes padded = valid;
  padded.resize(protocol::kMaxAcceptPrivateData, 0);
  Write("accept_data", "padded", padded);
  protocol::AcceptData a = ValidAccept();
  a.ring.length = 1024;
  Bytes small_ring;
  Put(small_ring, a);
  Write("accept_data", "ring_too_small", small_ring);
  a = ValidAccept();
  a.index.length += 64;
  Bytes index;
  Put(index, a);
  Write("accept_data", "index_not_power_of_two", index);
  a = ValidAccept();
  a.heap.addr = ~uint64_t{0} - 10;
  Bytes wraps;
  Put(wraps, a);
  Write("accept_data", "heap_wraps", wraps);

  // wire_checks: selector 1, then XOR masks over a valid accept and header
  // (zeros: both valid), then a table hash.
  Bytes pair{1};
  pair.resize(1 + sizeof(protocol::AcceptData) + sizeof(layout::TableHeader), 0);
  Bytes hash;
  Put(hash, uint64_t{0xfffffffffffffff0});
  Write("wire_checks", "valid_pair", Concat({pair, hash}));
  Bytes epoch = pair;
  epoch[1 + sizeof(protocol::AcceptData) + offsetof(layout::TableHeader, epoch)] = 1;
  Write("wire_checks", "epoch_differs", Concat({epoch, hash}));
  Bytes log2 = pair;
  log2[1 + sizeof(protocol::AcceptData) + offsetof(layout::TableHeader, bucket_count_log2)] = 3;
  Write("wire_checks", "log2_disagrees", Concat({log2, hash}));
  protocol::ReplyMsg r{};
  r.request_id = 9;
  r.credits = 1;
  r.version = 4;
  std::strcpy(r.message, "");
  Bytes reply{0};
  Put(reply, r);
  Write("wire_checks", "reply_ok", reply);
  r.status_code = 8;
  std::memset(r.message, 'x', sizeof(r.message));
  Bytes unterminated{0};
  Put(unterminated, r);
  Write("wire_checks", "reply_unterminated", unterminated);
}

void Neighborhood() {
  // max_key_bytes, max_value_bytes, fingerprint, 64 slots, heap.
  const uint16_t fp = 0xbeef;
  Bytes in;
  Put(in, uint16_t{1024});
  Put(in, uint32_t{4096});
  Put(in, fp);
  const Bytes rec = Record("key", "value", 0, 3);
  const Bytes rec2 = Record("other", std::string(200, 'v'), 0, 4);
  std::vector<uint64_t> slots(64, 0);
  slots[3] = layout::MakeSlot(fp, 0, rec.size());
  slots[17] = layout::MakeSlot(fp, 128, rec2.size());
  slots[40] = layout::MakeSlot(fp, 1 << 20, 64);        // past the heap
  slots[41] = layout::MakeSlot(fp ^ 1, 0, rec.size());   // another fingerprint
  slots[63] = layout::MakeSlot(fp, 64, 64);              // not a record
  for (const uint64_t s : slots) Put(in, s);
  Bytes heap = rec;
  heap.resize(128, 0);
  heap.insert(heap.end(), rec2.begin(), rec2.end());
  Write("neighborhood", "matches", Concat({in, heap}));
}

void Rejections() {
  Write("rejection", "unavailable", transport::EncodeRejection({StatusCode::kUnavailable, "server is busy"}));
  Write("rejection", "unauthenticated", transport::EncodeRejection({StatusCode::kUnauthenticated, "invalid token"}));
  Write("rejection", "challenge",
        transport::EncodeRejection({StatusCode::kUnauthenticated, "connect again with the proof for this challenge",
                                    Bytes{1, 0, 0, 0, 1, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4}}));
  Bytes long_detail = transport::EncodeRejection({StatusCode::kUnauthenticated, "x", Bytes{7}});
  long_detail[transport::kRejectionHeaderBytes + transport::kRejectionTextBytes] = 200;
  Write("rejection", "detail_too_long", long_detail);
  Bytes text;
  Put(text, std::string_view("plain text reason"));
  text.resize(148, 0);
  Write("rejection", "padded_text", text);
  Write("rejection", "zeros", Bytes(148, 0));
  Bytes bad_code = transport::EncodeRejection({StatusCode::kInternal, "x"});
  bad_code[4] = 99;
  Write("rejection", "unknown_code", bad_code);
}

void Fill(v1::RegionDescriptor* r, uint64_t addr, uint64_t length, uint32_t rkey) {
  r->set_addr(addr);
  r->set_length(length);
  r->set_rkey(rkey);
}

void Fill(v1::TableParams* t) {
  t->set_bucket_count_log2(10);
  t->set_hash_seed(42);
  t->set_heap_size(1 << 20);
  t->set_max_key_bytes(1024);
  t->set_max_value_bytes(64 << 10);
  t->set_grace_period_us(100000);
}

v1::ServerInfo Server(const std::string& id, std::vector<uint32_t> shards) {
  v1::ServerInfo s;
  s.set_server_id(id);
  s.set_epoch(2);
  s.set_state(v1::UP);
  s.set_data_address("10.0.0.1:7000");
  s.set_admin_address("10.0.0.1:7001");
  s.set_transport("tcp");
  Fill(s.mutable_index(), 0x10000, layout::IndexBytes(1024), 11);
  Fill(s.mutable_heap(), 0x200000, 1 << 20, 12);
  Fill(s.mutable_table());
  for (const uint32_t shard : shards) s.add_shards(shard);
  s.set_heap_bytes(1 << 20);
  return s;
}

void Control() {
  v1::JoinRequest join;
  join.set_server_id("server-1");
  join.set_epoch(2);
  join.set_data_address("127.0.0.1:7000");
  join.set_admin_address("[::1]:7001");
  join.set_transport("verbs");
  Fill(join.mutable_index(), 0x10000, layout::IndexBytes(1024), 11);
  Fill(join.mutable_heap(), 0x200000, 1 << 20, 12);
  Fill(join.mutable_table());
  Write("control_proto", "join", Concat({Bytes{0}, Serialized(join)}));
  join.set_data_address("host:0");
  Write("control_proto", "join_port_zero", Concat({Bytes{0}, Serialized(join)}));
  v1::HeartbeatRequest hb;
  hb.set_server_id("server-1");
  hb.set_epoch(2);
  hb.set_keys(10);
  Write("control_proto", "heartbeat", Concat({Bytes{1}, Serialized(hb)}));
  v1::LeaveRequest leave;
  leave.set_server_id("-bad");
  leave.set_epoch(2);
  Write("control_proto", "leave_bad_id", Concat({Bytes{2}, Serialized(leave)}));
  v1::TableParams t;
  Fill(&t);
  Write("control_proto", "table_params", Concat({Bytes{3}, Serialized(t)}));
  v1::RegionDescriptor r;
  Fill(&r, ~uint64_t{0} - 100, 50, 3);
  Write("control_proto", "region", Concat({Bytes{4}, Serialized(r)}));

  v1::ClusterMap map;
  map.set_version(5);
  map.set_shard_count(4);
  map.set_expected_servers(2);
  *map.add_servers() = Server("a", {0, 2});
  *map.add_servers() = Server("b", {1, 3});
  for (const char* owner : {"a", "b", "a", "b"}) map.add_shard_owner(owner);
  Write("cluster_map", "two_servers", Serialized(map));
  v1::ClusterMap pending;
  pending.set_version(1);
  pending.set_shard_count(4);
  pending.set_expected_servers(2);
  *pending.add_servers() = Server("a", {});
  Write("cluster_map", "unassigned", Serialized(pending));
  v1::ClusterMap wrong = map;
  wrong.set_shard_owner(1, "c");
  Write("cluster_map", "unknown_owner", Serialized(wrong));
  // R = 2 with zones; shard 3 has lost its backup.
  v1::ClusterMap replicated = map;
  replicated.set_replication_factor(2);
  replicated.mutable_servers(0)->set_zone("zone a");
  replicated.mutable_servers(1)->set_zone("zone b");
  for (uint32_t shard = 0; shard < 4; ++shard) {
    v1::ShardReplicas* r = replicated.add_shard_replicas();
    r->add_server_ids(shard % 2 == 0 ? "a" : "b");
    if (shard == 3) continue;
    r->add_server_ids(shard % 2 == 0 ? "b" : "a");
    replicated.mutable_servers(static_cast<int>((shard + 1) % 2))->add_backup_shards(shard);
  }
  Write("cluster_map", "replicated", Serialized(replicated));
  v1::ClusterMap primary_twice = replicated;
  primary_twice.mutable_shard_replicas(0)->set_server_ids(1, "a");
  Write("cluster_map", "primary_twice", Serialized(primary_twice));
  // R = 2 in flight: shard 0 passes its primary role from "b" (still a
  // backup) to "a" and has "c" catching up, so it lists 2R servers, more
  // than R in server_ids; shard 1 has "c" caught up beside its two replicas.
  v1::ClusterMap in_flight = replicated;
  v1::ServerInfo* c = in_flight.add_servers();
  *c = in_flight.servers(0);
  c->set_server_id("c");
  c->set_zone("zone c");
  c->clear_shards();
  c->clear_backup_shards();
  in_flight.set_expected_servers(3);
  in_flight.mutable_shard_replicas(0)->set_handover_from("b");
  in_flight.mutable_shard_replicas(0)->add_syncing_ids("c");
  c->add_syncing_shards(0);
  in_flight.mutable_shard_replicas(1)->add_server_ids("c");
  c->add_backup_shards(1);
  Write("cluster_map", "in_flight", Serialized(in_flight));
}

void Kvctl() {
  const auto args = [](uint8_t mode, std::initializer_list<std::string_view> list) {
    Bytes out{mode};
    bool first = true;
    for (const std::string_view a : list) {
      if (!first) out.push_back(0);
      first = false;
      Put(out, a);
    }
    return out;
  };
  Write("kvctl_args", "get", args(0, {"get", "key"}));
  Write("kvctl_args", "ttl", args(0, {"ttl", "key"}));
  Write("kvctl_args", "expire", args(0, {"expire", "key", "-30"}));
  Write("kvctl_args", "persist", args(0, {"persist", "key"}));
  Write("kvctl_args", "put_value", args(0, {"put", "key", "value"}));
  Write("kvctl_args", "put_stdin", args(0, {"put", "key", "-"}));
  Write("kvctl_args", "put_file", args(2, {"put", "key"}));
  Write("kvctl_args", "put_tty", args(4, {"put", "key"}));
  Write("kvctl_args", "del_hex", args(1, {"del", "0aFF"}));
  Write("kvctl_args", "bad_hex", args(1, {"get", "0g"}));
  Write("kvctl_args", "members", args(0, {"members"}));
  Write("kvctl_args", "shards", args(0, {"shards"}));
  Write("kvctl_args", "where_hex", args(1, {"where", "6b6579"}));
  Write("kvctl_args", "stats", args(0, {"stats", "server-1"}));
  Write("kvctl_args", "too_many", args(0, {"get", "a", "b"}));
  Write("kvctl_args", "verify", args(0, {"verify"}));
  Write("kvctl_args", "drain", args(0, {"drain", "server-1"}));
  Write("kvctl_args", "shard_list", args(0, {"0,3,10-12,3"}));
  Write("kvctl_args", "print_utf8", args(1 << 3, {"caf\xc3\xa9 \xf0\x9f\x98\x80 \"q\" \\ \t"}));
  Write("kvctl_args", "print_invalid", args(1 << 3, {"\xed\xa0\x80\xc0\xaf\xff"}));
  Write("kvctl_args", "listing",
        args(2 << 3, {"server-1", "UP", "10.0.0.1:7000", "10.0.0.1:7001", "tcp", "s\xc3\xa9rver", "DOWN\n", "", "", ""}));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  g_out = argv[1];
  TcpFrames();
  Records();
  Apply();
  Connect();
  Accept();
  Neighborhood();
  Rejections();
  Control();
  Kvctl();
  return 0;
}
