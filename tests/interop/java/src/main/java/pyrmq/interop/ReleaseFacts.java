package pyrmq.interop;

import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.TreeSet;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RemotingSerializable;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.heartbeat.ConsumeType;
import org.apache.rocketmq.remoting.protocol.heartbeat.ConsumerData;
import org.apache.rocketmq.remoting.protocol.heartbeat.HeartbeatData;
import org.apache.rocketmq.remoting.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.remoting.protocol.heartbeat.SubscriptionData;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.route.QueueData;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;

/**
 * Prints what this RocketMQ release's own jars write and decide, so that the tests can decode the
 * real bytes of each release and compare pyrmq's rules with the release's (docs/remoting-protocol.md
 * §2, §5, §6.1, §6.9, §11, §12; docs/store-format.md §3.3):
 *
 * <pre>
 *   ReleaseFacts &lt;text as UTF-8 hex&gt; [topic:NAME | group:NAME ...]
 *   HEADER &lt;hex&gt;              a request frame (length, type+header length, JSON header) as
 *                               RemotingCommand.fastEncodeHeader writes it (NettyEncoder's path),
 *                               code 10, extField "text" and remark = the text
 *   ROUTE &lt;hex&gt;               TopicRouteData.encode(): cluster = the text, brokerAddrs {0:..}
 *   HEARTBEAT &lt;model&gt; &lt;hex&gt;   HeartbeatData.encode() of one consumer, once per MessageModel value
 *   REQUEST_CODE &lt;name&gt; &lt;int&gt;  every RequestCode constant
 *   RESPONSE_CODE &lt;name&gt; &lt;int&gt; every ResponseCode constant (and the inherited system ones)
 *   VERSION &lt;int&gt;             MQVersion.CURRENT_VERSION
 *   NOT_ALLOWED_SEND_TOPIC &lt;t&gt;  each of TopicValidator.getNotAllowedSendTopicSet()
 *   SYSTEM_TOPIC &lt;t&gt;            each of TopicValidator.getSystemTopicSet()
 *   VALIDATE topic|group &lt;name&gt; true|false|unchecked [remark]
 *                               TopicValidator.validateTopic / validateGroup (by reflection: the
 *                               result class was renamed in 5.5.0, and 5.3.3 has no validateGroup)
 * </pre>
 */
public final class ReleaseFacts {
    private ReleaseFacts() {
    }

    public static void main(String[] argv) throws ReflectiveOperationException {
        if (argv.length < 1) {
            Common.usage("ReleaseFacts <text as UTF-8 hex> [topic:NAME | group:NAME ...]",
                "expected the text");
        }
        // As BrokerStartup and MQAdminStartup do: commands carry this release's version.
        System.setProperty(RemotingCommand.REMOTING_VERSION_KEY, Integer.toString(MQVersion.CURRENT_VERSION));
        String text = new String(fromHex(argv[0]), StandardCharsets.UTF_8);

        RemotingCommand request = RemotingCommand.createRequestCommand(RequestCode.SEND_MESSAGE, null);
        request.addExtField("text", text);
        request.setRemark(text);
        request.setOpaque(7);
        ByteBuf frame = Unpooled.buffer();
        request.fastEncodeHeader(frame);
        byte[] header = new byte[frame.readableBytes()];
        frame.readBytes(header);
        Common.out("HEADER " + toHex(header));

        HashMap<Long, String> addrs = new HashMap<>();
        addrs.put(0L, "127.0.0.1:10911");
        TopicRouteData route = new TopicRouteData();
        route.setBrokerDatas(new ArrayList<>(List.of(new BrokerData(text, "broker-a", addrs))));
        QueueData queue = new QueueData();
        queue.setBrokerName("broker-a");
        queue.setReadQueueNums(4);
        queue.setWriteQueueNums(4);
        queue.setPerm(6);
        route.setQueueDatas(new ArrayList<>(List.of(queue)));
        route.setFilterServerTable(new HashMap<>());
        Common.out("ROUTE " + toHex(route.encode()));

        for (MessageModel model : MessageModel.values()) {
            ConsumerData consumer = new ConsumerData();
            consumer.setGroupName("group-" + model.name());
            consumer.setConsumeType(ConsumeType.CONSUME_PASSIVELY);
            consumer.setMessageModel(model);
            consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
            consumer.setSubscriptionDataSet(new HashSet<>(Collections.singleton(new SubscriptionData("TopicTest", "*"))));
            HeartbeatData heartbeat = new HeartbeatData();
            heartbeat.setClientID("127.0.0.1@json-samples-" + model.name());
            heartbeat.getConsumerDataSet().add(consumer);
            Common.out("HEARTBEAT " + model.name() + " " + toHex(RemotingSerializable.encode(heartbeat)));
        }

        printConstants("REQUEST_CODE", RequestCode.class);
        printConstants("RESPONSE_CODE", ResponseCode.class);
        Common.out("VERSION " + MQVersion.CURRENT_VERSION);
        for (String topic : new TreeSet<>(TopicValidator.getNotAllowedSendTopicSet())) {
            Common.out("NOT_ALLOWED_SEND_TOPIC " + topic);
        }
        for (String topic : new TreeSet<>(TopicValidator.getSystemTopicSet())) {
            Common.out("SYSTEM_TOPIC " + topic);
        }
        for (int i = 1; i < argv.length; i++) {
            int colon = argv[i].indexOf(':');
            String kind = argv[i].substring(0, colon);
            String name = argv[i].substring(colon + 1);
            Common.out("VALIDATE " + kind + " " + name + " " + validate(kind, name));
        }
        System.exit(Common.EXIT_OK);
    }

    /** "true", "false remark..." or "unchecked" (the release has no such check). */
    private static String validate(String kind, String name) throws ReflectiveOperationException {
        Method method;
        try {
            method = TopicValidator.class.getMethod("topic".equals(kind) ? "validateTopic" : "validateGroup",
                String.class);
        } catch (NoSuchMethodException e) {
            return "unchecked";
        }
        Object result = method.invoke(null, name);
        boolean valid = (Boolean) result.getClass().getMethod("isValid").invoke(result);
        Object remark = result.getClass().getMethod("getRemark").invoke(result);
        return valid ? "true" : "false " + remark;
    }

    /** Every public static int constant of the class, its superclasses' included. */
    private static void printConstants(String kind, Class<?> type) throws IllegalAccessException {
        for (Field field : type.getFields()) {
            int modifiers = field.getModifiers();
            if (Modifier.isStatic(modifiers) && field.getType() == int.class) {
                Common.out(kind + " " + field.getName() + " " + field.getInt(null));
            }
        }
    }

    private static byte[] fromHex(String hex) {
        byte[] bytes = new byte[hex.length() / 2];
        for (int i = 0; i < bytes.length; i++) {
            bytes[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
        }
        return bytes;
    }

    private static String toHex(byte[] bytes) {
        StringBuilder out = new StringBuilder(bytes.length * 2);
        for (byte b : bytes) {
            out.append(String.format("%02x", b & 0xff));
        }
        return out.toString();
    }
}
