package pyrmq.interop;

import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import java.util.function.Supplier;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.SerializeType;
import org.apache.rocketmq.remoting.protocol.header.GetMaxOffsetRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.PullMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.QueryConsumerOffsetResponseHeader;
import org.apache.rocketmq.remoting.protocol.header.SendMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.SendMessageRequestHeaderV2;
import org.apache.rocketmq.remoting.protocol.header.SendMessageResponseHeader;

/**
 * Prints whole frames as this RocketMQ release's own RemotingCommand writes them (NettyEncoder's
 * path: fastEncodeHeader, then the body), in both serialize types, for the golden-frame test
 * (tests/interop/test_golden_frames.py compares pyrmq's bytes with them):
 *
 * <pre>
 *   FRAME &lt;name&gt; JSON|ROCKETMQ &lt;hex&gt;
 * </pre>
 *
 * The commands use typed headers as the Java client and broker build them (makeCustomHeaderToNet
 * puts their fields into the extFields HashMap, so the order on the wire is Java's hash order).
 */
public final class GoldenFrames {
    private GoldenFrames() {
    }

    public static void main(String[] argv) {
        // As the client and the broker do: commands carry this release's version.
        System.setProperty(RemotingCommand.REMOTING_VERSION_KEY, Integer.toString(MQVersion.CURRENT_VERSION));

        GetMaxOffsetRequestHeader maxOffset = new GetMaxOffsetRequestHeader();
        maxOffset.setTopic("TopicTest");
        maxOffset.setQueueId(3);
        print("get_max_offset", () -> RemotingCommand.createRequestCommand(RequestCode.GET_MAX_OFFSET, maxOffset), null);

        SendMessageRequestHeader send = new SendMessageRequestHeader();
        send.setProducerGroup("ProducerGroup");
        send.setTopic("TopicTest");
        send.setDefaultTopic("TBW102");
        send.setDefaultTopicQueueNums(4);
        send.setQueueId(1);
        send.setSysFlag(0);
        send.setBornTimestamp(1700000000000L);
        send.setFlag(0);
        send.setProperties("TAGS\u0001TagA\u0002WAIT\u0001true\u0002");
        send.setReconsumeTimes(0);
        send.setUnitMode(false);
        send.setBatch(false);
        print("send_message", () -> RemotingCommand.createRequestCommand(RequestCode.SEND_MESSAGE, send), "hello");
        print("send_message_v2", () -> RemotingCommand.createRequestCommand(RequestCode.SEND_MESSAGE_V2,
            SendMessageRequestHeaderV2.createSendMessageRequestHeaderV2(send)), "hello");

        PullMessageRequestHeader pull = new PullMessageRequestHeader();
        pull.setConsumerGroup("ConsumerGroup");
        pull.setTopic("TopicTest");
        pull.setQueueId(2);
        pull.setQueueOffset(100L);
        pull.setMaxMsgNums(32);
        pull.setSysFlag(6);
        pull.setCommitOffset(0L);
        pull.setSuspendTimeoutMillis(15000L);
        pull.setSubscription("TagA || TagB");
        pull.setSubVersion(1700000000001L);
        pull.setExpressionType("TAG");
        print("pull_message", () -> RemotingCommand.createRequestCommand(RequestCode.PULL_MESSAGE, pull), null);

        print("send_response", () -> {
            RemotingCommand sent = RemotingCommand.createResponseCommand(SendMessageResponseHeader.class);
            SendMessageResponseHeader sentHeader = (SendMessageResponseHeader) sent.readCustomHeader();
            sentHeader.setMsgId("7F00000100002A9F0000000000000000");
            sentHeader.setQueueId(1);
            sentHeader.setQueueOffset(42L);
            sent.setCode(ResponseCode.SUCCESS);
            sent.setRemark(null);
            return sent;
        }, null);

        print("query_consumer_offset_response", () -> {
            RemotingCommand offset = RemotingCommand.createResponseCommand(QueryConsumerOffsetResponseHeader.class);
            ((QueryConsumerOffsetResponseHeader) offset.readCustomHeader()).setOffset(1234L);
            offset.setCode(ResponseCode.SUCCESS);
            offset.setRemark(null);
            return offset;
        }, null);

        print("system_error_response",
            () -> RemotingCommand.createResponseCommand(ResponseCode.SYSTEM_ERROR, "no such thing"), null);
        System.exit(Common.EXIT_OK);
    }

    /** A fresh command per serialization: encoding fills the command's extFields in place. */
    private static void print(String name, Supplier<RemotingCommand> make, String body) {
        for (SerializeType type : new SerializeType[] {SerializeType.JSON, SerializeType.ROCKETMQ}) {
            RemotingCommand command = make.get();
            command.setOpaque(7);
            if (body != null) {
                command.setBody(body.getBytes(java.nio.charset.StandardCharsets.UTF_8));
            }
            command.setSerializeTypeCurrentRPC(type);
            ByteBuf frame = Unpooled.buffer();
            command.fastEncodeHeader(frame);
            if (command.getBody() != null) {
                frame.writeBytes(command.getBody());
            }
            byte[] bytes = new byte[frame.readableBytes()];
            frame.readBytes(bytes);
            StringBuilder hex = new StringBuilder();
            for (byte b : bytes) {
                hex.append(String.format("%02x", b & 0xff));
            }
            Common.out("FRAME " + name + " " + type.name() + " " + hex);
        }
    }
}
